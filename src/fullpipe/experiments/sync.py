"""sync: joining a producer -> consumer chain across streams by event, by stream
synchronize, or by device synchronize.

Item i: a producer kernel on stream P, then a consumer kernel on stream C that
must not start before producer i has ended. The dependency is made three ways
(one difference each):

- ``cudaStreamWaitEvent``: record an event on P, make C wait for it; the host
  never waits, so producer i+1 runs while consumer i does;
- ``cudaStreamSynchronize(P)`` on the host before enqueueing consumer i;
- ``cudaDeviceSynchronize()`` on the host before enqueueing consumer i (it also
  waits for consumer i-1).

Every kernel writes its start/end on the GPU's global timer, which checks the
dependency (consumer i starts after producer i ends, for every i) and gives the
GPU's idle time: the span minus the union of all kernel intervals. Bound: items x
the longer kernel (producer i+1 and consumer i can run at once).
"""

from __future__ import annotations

from pathlib import Path
import time

import numpy as np

from ..cuda import driver as drv
from ..cuda.compiler import compile_package_kernel
from ..cuda.events import create_event, record, wait
from ..cuda.launch import launch
from ..cuda.memory import memset_d8
from ..cuda.pool import DevicePool
from ..cuda.streams import create_stream
from ..pipeline.stats import union_length
from ..cuda.device import device_info
from .result import Bound, Result
from .claims import UNJUDGED, Data, Judged, Missing, at_least, percent, rule, with_claims
from .figures import BOUND, PAGEABLE, PLAIN, RING, WIDE, label_bars, need, pyplot, save

NAME = "sync"
TITLE = "Producer -> consumer across streams: event wait vs stream sync vs device sync"
CLAIM = "Joining streams with cudaStreamWaitEvent keeps the GPU busy; host-side synchronization leaves it idle"
TECHNIQUE = (  # what the technique is, for a reader who has not met it (the report's page)
    "To make stream C wait for stream P, record an event on P and make C wait for it "
    "(cudaStreamWaitEvent): the dependency lives on the GPU and the host keeps enqueueing. Synchronizing "
    "on the host instead (stream or device synchronize) leaves the GPU idle for a host round trip per "
    "dependency."
)
# The claims whose verdicts make this experiment's verdict (claims.summary): the one claim its CLAIM makes.
VERDICT_FROM = ("event-join",)

MODES = ("event", "stream sync", "device sync")


def run(ctx) -> Result:
    dev = ctx.device
    items = 200 if ctx.quick else 1000
    kern = compile_package_kernel("pipeline/stamps.cu", device=dev).kernel("spin_stamp_sm")
    pool = DevicePool(dev)
    p, c = create_stream(dev), create_stream(dev)
    stamps = pool.empty((items, 2, 4), np.uint64, p)
    p.sync()
    ev = create_event(dev)
    rows, results = [], {}
    kernel_us_list = (50, 500)
    step = 0
    for kernel_us in kernel_us_list:
        ns = np.uint64(kernel_us * 1000)
        bound_ms = items * kernel_us / 1e3
        for mode in MODES:
            ctx.progress(step / (len(MODES) * len(kernel_us_list)), f"{mode}, {kernel_us} us kernels")
            step += 1
            memset_d8(stamps.ptr, 0, stamps.nbytes, p)
            dev.synchronize()
            t0 = time.perf_counter()
            for i in range(items):
                launch(p, kern, 1, 32, ns, np.uint64(stamps.ptr + (2 * i) * 32), np.uint64(i))
                if mode == "event":
                    record(p, ev)
                    wait(c, ev)
                elif mode == "stream sync":
                    with drv.translated("cuStreamSynchronize"):
                        p.sync()
                else:
                    dev.synchronize()
                launch(c, kern, 1, 32, ns, np.uint64(stamps.ptr + (2 * i + 1) * 32), np.uint64(i))
            dev.synchronize()
            wall_ms = (time.perf_counter() - t0) * 1e3
            s = stamps.to_numpy(p).astype(np.int64)  # (items, 2, 4): start, end, sm, tag
            prod, cons = s[:, 0, :2], s[:, 1, :2]
            ordered = bool(np.all(cons[:, 0] >= prod[:, 1]))
            intervals = [(int(a), int(b)) for a, b in np.concatenate([prod, cons])]
            span = (max(b for _, b in intervals) - min(a for a, _ in intervals)) / 1e6
            busy = union_length(intervals) / 1e6
            idle = span - busy
            row = {"kernel_us": kernel_us, "mode": mode, "items/s": items / (wall_ms / 1e3),
                   "wall_ms": wall_ms, "bound_ms": bound_ms, "ratio": bound_ms / wall_ms,
                   "gpu_idle_ms": idle, "gpu_idle_fraction": idle / span if span else None,
                   "dependency_held": ordered}
            rows.append(row)
            results[(kernel_us, mode)] = row
    # A consumer that started before its producer ended: the join did not hold and the idle
    # times measure a broken pipeline (failed). Otherwise the rule below judges the claim.
    held = all(r["dependency_held"] for r in rows)
    verdict = UNJUDGED if held else "failed"
    broken = [] if held else ["A consumer started before its producer ended (globaltimer): the join did not hold, "
                              "numbers not trusted."]
    long_k = kernel_us_list[-1]
    return with_claims(Result(
        experiment=NAME, claim=CLAIM, verdict=verdict, device=device_info(dev),
        params={"items": items, "kernel_us": list(kernel_us_list)},
        metrics={f"{k}us_{m.replace(' ', '_')}": {"items_per_s": r["items/s"], "idle_fraction": r["gpu_idle_fraction"]}
                 for (k, m), r in results.items()},
        bound=Bound(f"items x kernel time ({long_k} us kernels): producer i+1 overlaps consumer i",
                    items * long_k / 1e3, "ms"),
        ratio=results[(long_k, "event")]["ratio"], table=rows,
        notes=broken + [
            "dependency_held: every consumer started after its producer ended (globaltimer), in every mode.",
            "Stream sync lets consumer i run while the host enqueues producer i+1, but the producer "
            "stream idles for a host round trip per item; device sync also waits for consumer i-1, "
            "so nothing overlaps.",
            "With short kernels the Python launch rate (two launches per item) can bound every mode.",
        ],
    ), VERDICT_FROM)


# --------------------------------------------------------------------------- verdicts
@rule(NAME, "event-join", "joining streams with cudaStreamWaitEvent keeps the GPU busy; host-side synchronization leaves it idle")
def _sync(d: Data) -> Judged:
    rows = d.rows()
    if not rows:
        raise Missing("table")
    sizes = sorted({r["kernel_us"] for r in rows})
    parts, ok = [], []
    for k in sizes:
        by = {r["mode"]: r for r in rows if r["kernel_us"] == k}
        ev = by["event"]
        others = [v for m, v in by.items() if m != "event"]
        ok.append(d.num(ev, "gpu_idle_fraction") <= min(d.num(o, "gpu_idle_fraction") for o in others) + 0.01
                  and d.num(ev, "items/s") >= 0.98 * max(d.num(o, "items/s") for o in others))
        parts.append(f"{k} µs kernels: GPU idle " + ", ".join(f"{m} {percent(d.num(v, 'gpu_idle_fraction'))}"
                                                              for m, v in by.items()))
    short = next(r for r in rows if r["kernel_us"] == sizes[0] and r["mode"] == "event")
    return Judged(measured="; ".join(parts),
                  bound=f"items × kernel time = {d.num(short, 'bound_ms'):.0f} ms ({sizes[0]} µs kernels): "
                        f"event join at {d.num(short, 'ratio'):.2f}× it",
                  ratio=d.num(short, "ratio"), verdict=at_least(sum(ok) / len(ok), 1.0, 0.5),
                  target="supported: event join has the least idle time and the most items/s at every kernel length")


# --------------------------------------------------------------------------- figure
def figures(r: dict, out: Path) -> dict[str, Path]:
    """The page's figure, drawn from the result's JSON into the folder ``out``."""
    plt = pyplot()
    rows = r.get("table") or []
    sizes = sorted({x["kernel_us"] for x in rows})
    modes = list(dict.fromkeys(x["mode"] for x in rows))
    need(sizes and modes, "table.kernel_us/mode")
    fig, (a1, a2) = plt.subplots(1, 2, figsize=WIDE)
    width = 0.8 / len(modes)
    colors = {"event": RING, "stream sync": PLAIN, "device sync": PAGEABLE}
    for j, m in enumerate(modes):
        xs = [i + (j - (len(modes) - 1) / 2) * width for i in range(len(sizes))]
        by = {x["kernel_us"]: x for x in rows if x["mode"] == m}
        idle = [100 * (by[k].get("gpu_idle_fraction") or 0) for k in sizes]
        ratio = [by[k].get("ratio") or 0 for k in sizes]
        label_bars(a1, a1.bar(xs, idle, width=width, color=colors.get(m, f"C{j}"), label=m), "{:.1f}", False)
        label_bars(a2, a2.bar(xs, ratio, width=width, color=colors.get(m, f"C{j}"), label=m), "{:.2f}", False)
    for ax in (a1, a2):
        ax.set_xticks(range(len(sizes)), [f"{k} µs kernels" for k in sizes])
        ax.grid(axis="y", alpha=0.3)
    a1.set_ylabel("GPU idle (% of the span)")
    a1.set_title("idle time between dependent kernels")
    a1.legend()
    a2.axhline(1.0, color=BOUND, ls="--", lw=1.2)
    a2.annotate("bound: items × kernel time (producer i+1 ‖ consumer i)", (0.5, 1.0),
                xycoords=("axes fraction", "data"), xytext=(0, 12), textcoords="offset points", ha="center",
                fontsize=8)
    a2.set_ylabel("throughput / bound")
    a2.set_ylim(0, 1.2)
    a2.set_title("producer → consumer throughput against the bound")
    return {"event join vs host synchronization": save(fig, out / f"{NAME}.png")}
