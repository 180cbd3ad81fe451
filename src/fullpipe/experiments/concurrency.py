"""concurrency: small kernels on many streams share SMs; at most 128 grids run at once.

1. Sharing SMs: 8 kernels on 8 streams, each with one block per SM (64 threads,
   spinning a few ms). Each block writes its SM id and its start/end on the global
   timer: count the SMs that ran blocks of two or more different kernels at the
   same instant.
2. The resident-grid limit: more one-block kernels than the limit (128 on every
   GPU from compute capability 7.0), each on its own stream, each spinning long
   enough that all are launched before the first ends. The largest number of
   intervals open at one instant is how many grids ran at once. A run with fewer
   kernels than the limit is the control (all of them should run at once).
"""

from __future__ import annotations

from pathlib import Path
import numpy as np

from ..cuda.compiler import compile_package_kernel
from ..cuda.launch import launch
from ..cuda.memory import memset_d8
from ..cuda.pool import DevicePool
from ..cuda.streams import create_stream
from ..pipeline.stats import max_concurrency
from ..cuda.device import device_info
from .result import Bound, Result
from .claims import UNJUDGED, Data, Judged, Missing, is_num, rule, with_claims
from .figures import BOUND, GREY, PINNED, label_bars, need, pyplot, save

NAME = "concurrency"
TITLE = "Kernels from many streams share SMs; at most 128 grids are resident at once"
CLAIM = ("Blocks of different kernels run on one SM at the same time, and at most 128 grids "
         "(the resident-grid limit) run at once")
TECHNIQUE = (  # what the technique is, for a reader who has not met it (the report's page)
    "Kernels on different streams can run at the same time, even on the same SM, when resources allow; "
    "the hardware keeps a bounded number of grids resident (128 from compute capability 7.0). Small "
    "kernels from many streams fill a GPU that one small kernel leaves mostly idle."
)
# The claims whose verdicts make this experiment's verdict (claims.summary): the two claims its CLAIM makes.
VERDICT_FROM = ("sm-sharing", "resident-grids")


def _stamps_of(arr, stream) -> np.ndarray:
    return arr.to_numpy(stream).reshape(-1, 4).astype(np.int64)  # start, end, sm, tag


def _sharing(dev, kern, pool, s, spin_ms: float, kernels: int = 8) -> dict:
    blocks = dev.facts.sm_count
    streams = [create_stream(dev) for _ in range(kernels)]
    out = pool.empty((kernels, blocks, 4), np.uint64, s)
    memset_d8(out.ptr, 0, out.nbytes, s)
    s.sync()
    for i, st in enumerate(streams):
        launch(st, kern, blocks, 64, np.uint64(int(spin_ms * 1e6)), np.uint64(out.ptr + i * blocks * 32), np.uint64(i))
    dev.synchronize()
    st_ = _stamps_of(out, s)
    per_sm: dict[int, list[tuple[int, int, int]]] = {}
    for a, b, sm, tag in st_:
        per_sm.setdefault(int(sm), []).append((int(a), int(b), int(tag)))
    shared_sms, most_kernels = 0, 0
    for blocks_on_sm in per_sm.values():
        # how many distinct kernels were on this SM at one instant
        best = 0
        for a, b, _ in blocks_on_sm:
            t = (a + b) // 2
            kinds = {tag for (a2, b2, tag) in blocks_on_sm if a2 <= t < b2}
            best = max(best, len(kinds))
        most_kernels = max(most_kernels, best)
        shared_sms += best >= 2
    pool.free_array(out, s)
    return {"kernels": kernels, "blocks_per_kernel": blocks, "sms_used": len(per_sm),
            "sms_shared_by_2plus_kernels": shared_sms, "most_kernels_on_one_sm_at_once": most_kernels}


def _resident(dev, kern, pool, s, grids: int, spin_ms: float) -> dict:
    streams = [create_stream(dev) for _ in range(grids)]
    out = pool.empty((grids, 4), np.uint64, s)
    memset_d8(out.ptr, 0, out.nbytes, s)
    s.sync()
    dev.synchronize()
    for i, st in enumerate(streams):
        launch(st, kern, 1, 32, np.uint64(int(spin_ms * 1e6)), np.uint64(out.ptr + i * 32), np.uint64(i))
    dev.synchronize()
    st_ = _stamps_of(out, s)
    intervals = [(int(a), int(b)) for a, b, _, _ in st_]
    span = (max(b for _, b in intervals) - min(a for a, _ in intervals)) / 1e6
    launched_before_first_end = sum(a < min(b for _, b in intervals) for a, _ in intervals)
    for st in streams:
        st.close()
    pool.free_array(out, s)
    return {"grids": grids, "ran_at_once": max_concurrency(intervals), "span_ms": span,
            "waves": span / spin_ms, "started_before_first_end": launched_before_first_end}


def run(ctx) -> Result:
    dev = ctx.device
    limit = dev.facts.max_resident_grids
    spin_ms = 20.0 if ctx.quick else 50.0
    kern = compile_package_kernel("pipeline/stamps.cu", device=dev).kernel("spin_stamp_sm")
    pool = DevicePool(dev)
    s = create_stream(dev)
    ctx.progress(0.0, "SM sharing")
    share = _sharing(dev, kern, pool, s, spin_ms=5.0)
    rows = [{"test": "SM sharing", "grids": share["kernels"], "ran_at_once": share["most_kernels_on_one_sm_at_once"],
             "detail": f"{share['sms_shared_by_2plus_kernels']} of {share['sms_used']} SMs ran blocks of "
                       f">= 2 kernels at once"}]
    results = {}
    counts = (limit // 2, limit + limit // 2) if ctx.quick else (limit // 2, limit + limit // 2, 2 * limit + 16)
    for i, g in enumerate(counts):
        ctx.progress(0.2 + 0.8 * i / len(counts), f"{g} one-block kernels on {g} streams")
        r = _resident(dev, kern, pool, s, g, spin_ms)
        results[g] = r
        rows.append({"test": "resident grids", "grids": g, "ran_at_once": r["ran_at_once"],
                     "detail": f"span {r['span_ms']:.1f} ms = {r['waves']:.2f} x spin; "
                               f"{r['started_before_first_end']} started before the first ended"})
    over = [results[g]["ran_at_once"] for g in counts if g > limit]
    control = results[counts[0]]["ran_at_once"]
    limit_ok = all(o == limit for o in over) and control == counts[0]
    notes = [
        f"Control: {counts[0]} kernels, {control} ran at once. Above the limit: "
        + ", ".join(f"{g} kernels -> {results[g]['ran_at_once']} at once" for g in counts[1:]) + ".",
        f"Sharing: {share['kernels']} kernels x {share['blocks_per_kernel']} blocks; up to "
        f"{share['most_kernels_on_one_sm_at_once']} different kernels on one SM at one instant.",
        "Streams map onto CUDA_DEVICE_MAX_CONNECTIONS hardware queues (8 by default); the grids "
        "here have no dependencies, so sharing a queue does not serialize them.",
    ]
    if not limit_ok and over:
        notes.append(f"Measured {max(over)} grids at once above the limit, not {limit}: "
                     "the 128 figure is not what this device/driver does.")
    ratio = (max(over) / limit) if over else None
    return with_claims(Result(
        experiment=NAME, claim=CLAIM, verdict=UNJUDGED, device=device_info(dev),
        params={"spin_ms": spin_ms, "grid_counts": list(counts), "limit_from_spec": limit},
        metrics={"sharing": share, "resident": {str(g): r for g, r in results.items()}},
        bound=Bound("max resident grids (CUDA spec, compute capability >= 7.0)", limit, "grids"),
        ratio=ratio, table=rows, notes=notes,
    ), VERDICT_FROM)


# --------------------------------------------------------------------------- verdicts
@rule(NAME, "sm-sharing", "blocks of different kernels run on one SM at the same time")
def _sm_sharing(d: Data) -> Judged:
    s = d.m("sharing")
    return Judged(measured=f"up to {s['most_kernels_on_one_sm_at_once']} different kernels on one SM at once; "
                           f"{s['sms_shared_by_2plus_kernels']} of {s['sms_used']} SMs shared",
                  bound=f"{s['kernels']} kernels launched", ratio=s["most_kernels_on_one_sm_at_once"] / s["kernels"],
                  verdict="supported" if s["sms_shared_by_2plus_kernels"] > 0 else "not supported",
                  target="supported: any SM ran blocks of two kernels at the same instant")


@rule(NAME, "resident-grids", "at most 128 grids (the resident-grid limit) run at once")
def _judge_resident(d: Data) -> Judged:
    res = d.m("resident")
    limit = int(d.p("limit_from_spec"))
    over = {int(g): v["ran_at_once"] for g, v in res.items() if int(g) > limit}
    under = {int(g): v["ran_at_once"] for g, v in res.items() if int(g) <= limit}
    if not over:
        raise Missing("a run with more grids than the limit")
    ok = all(v == limit for v in over.values()) and all(v == g for g, v in under.items())
    return Judged(measured="; ".join(f"{g} launched → {v} at once" for g, v in sorted({**under, **over}.items())),
                  bound=f"max resident grids (CUDA spec) = {limit}", ratio=max(over.values()) / limit,
                  verdict="supported" if ok else "not supported",
                  target="supported: exactly the limit above it, all of them below it")


# --------------------------------------------------------------------------- figure
def figures(r: dict, out: Path) -> dict[str, Path]:
    """The page's figure, drawn from the result's JSON into the folder ``out``."""
    plt = pyplot()
    rows = [x for x in r.get("table") or [] if is_num(x.get("grids")) and is_num(x.get("ran_at_once"))]
    need(rows, "table.grids/ran_at_once")
    limit = (r.get("params") or {}).get("limit_from_spec")
    fig, ax = plt.subplots(figsize=(11, 3.8))
    labels = [f"{x['test']}\n{x['grids']} kernels" for x in rows]
    xs = range(len(rows))
    b1 = ax.bar([i - 0.2 for i in xs], [x["grids"] for x in rows], width=0.4, color=GREY, label="kernels launched")
    b2 = ax.bar([i + 0.2 for i in xs], [x["ran_at_once"] for x in rows], width=0.4, color=PINNED,
                label="ran at once (on one SM for SM sharing; on the GPU for resident grids)")
    label_bars(ax, b1, "{:.0f}", False)
    label_bars(ax, b2, "{:.0f}", False)
    if is_num(limit):
        ax.axhline(limit, color=BOUND, ls="--", lw=1.2, label=f"bound: max resident grids = {limit}")
    ax.set_xticks(list(xs), labels)
    ax.set_ylabel("kernels (grids)")
    ax.set_title("kernels from many streams: SM sharing and the resident-grid limit")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return {"kernels launched vs kernels running at once": save(fig, out / f"{NAME}.png")}
