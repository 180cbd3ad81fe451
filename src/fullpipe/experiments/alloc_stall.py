"""alloc-stall: is cudaMalloc/cudaFree a device-wide barrier, and cudaMallocAsync stream-local?

A long kernel (one block spinning on the global timer) runs on stream A. While it
runs, the host allocates a buffer for stream B, has B write it, frees it, and then
enqueues B's next kernel. Three ways to allocate, one difference each:

- ``cuMemAlloc``/``cuMemFree`` (what cudaMalloc/cudaFree do);
- the fullpipe pool, warm (threshold "max", memory already reserved);
- the fullpipe pool, cold (threshold 0 and trimmed: the pool must get memory from
  the driver on this allocation).

Measured: how long each host call blocks (perf_counter), and from globaltimer
stamps whether B's next kernel started before A's kernel ended.
"""

from __future__ import annotations

from pathlib import Path
import time

import numpy as np

from ..cuda import driver as drv
from ..cuda.launch import launch
from ..cuda.pool import DevicePool
from ..cuda.streams import create_stream
from . import _alloc_common as common
from ..cuda.timing import median
from .result import Bound, Result
from .claims import UNJUDGED, Data, Judged, both, is_num, rule, with_claims
from .figures import BOUND, WIDE, allocator_color, label_bars, need, plain_log, pyplot, save

NAME = "alloc-stall"
TITLE = "cudaMalloc/cudaFree vs the stream-ordered pool while another stream's kernel runs"
CLAIM = "cudaMalloc/cudaFree is a device-wide barrier; cudaMallocAsync is stream-local"
TECHNIQUE = (  # what the technique is, for a reader who has not met it (the report's page)
    "cudaMalloc/cudaFree synchronize the device: a free waits for the work of every stream, so one "
    "allocation in one stream stalls the others. cudaMallocAsync/cudaFreeAsync allocate from a memory "
    "pool in stream order and wait for nothing else."
)
# The claims whose verdicts make this experiment's verdict (claims.summary): its canonical one.
VERDICT_FROM = ("malloc-stalls-streams",)

POOL_HOST_TARGET_MS = 0.1


def _one_round(dev, variant, spin, stamps_a, stamps_b, a, b, nbytes, spin_ns, tag):
    """One long kernel on A, then alloc / use / free / next kernel on B. Returns a row."""
    launch(a, spin, 1, 32, np.uint64(spin_ns), np.uint64(stamps_a.ptr))
    t0 = time.perf_counter()
    ptr, handle = variant.alloc(nbytes, b)
    t1 = time.perf_counter()
    common.fill_pattern(dev, b, ptr, nbytes, tag)  # B uses the buffer
    t2 = time.perf_counter()
    variant.free(handle, b)
    t3 = time.perf_counter()
    launch(b, spin, 1, 32, np.uint64(10_000), np.uint64(stamps_b.ptr))  # B's next work (10 us)
    with drv.translated("cuStreamSynchronize"):
        a.sync()
        b.sync()
    sa, sb = stamps_a.to_numpy(a), stamps_b.to_numpy(b)
    a0, a1, b0 = int(sa[0]), int(sa[1]), int(sb[0])
    return {
        "alloc_ms": (t1 - t0) * 1e3,
        "free_ms": (t3 - t2) * 1e3,
        "host_ms": (t1 - t0 + t3 - t2) * 1e3,
        "a_kernel_ms": (a1 - a0) / 1e6,
        "b_next_start_after_a_start_ms": (b0 - a0) / 1e6,
        "b_waited_for_a": b0 >= a1,
    }


def run(ctx) -> Result:
    dev = ctx.device
    spin_ms = 50 if ctx.quick else 100
    reps = 3 if ctx.quick else 7
    nbytes = 64 * common.MiB
    spin_ns = spin_ms * 1_000_000
    spin = common.probes(dev).kernel("spin_stamp")
    common.kernels(dev)  # compile before timing anything

    a, b = create_stream(dev), create_stream(dev)
    aux = DevicePool(dev, release_threshold="max")  # the stamp buffers, outside the comparison
    stamps_a = aux.empty(2, np.uint64, a)
    stamps_b = aux.empty(2, np.uint64, b)
    warm_pool = DevicePool(dev, release_threshold="max")
    cold_pool = DevicePool(dev, release_threshold=0)

    class ColdPool(common.PoolAllocator):
        def alloc(self, n, stream):
            self.pool.trim(0)  # nothing reserved: this allocation must map new memory
            return super().alloc(n, stream)

    variants = [
        ("cuMemAlloc+cuMemFree", common.DriverMalloc()),
        ("pool, warm (threshold max)", common.PoolAllocator(warm_pool)),
        ("pool, cold (threshold 0, trimmed)", ColdPool(cold_pool)),
    ]
    # Warm-up on an idle device: first-call costs out of the way, the warm pool filled.
    for _, v in variants:
        ptr, h = v.alloc(nbytes, b)
        v.free(h, b)
    b.sync()

    rows, per_variant = [], {}
    total = len(variants) * reps
    done = 0
    for label, v in variants:
        results = []
        for r in range(reps):
            ctx.progress(done / total, label)
            results.append(_one_round(dev, v, spin, stamps_a, stamps_b, a, b, nbytes, spin_ns, tag=r + 1))
            done += 1
        per_variant[label] = results
        rows.append({
            "allocator": label,
            "alloc host ms": median([x["alloc_ms"] for x in results]),
            "free host ms": median([x["free_ms"] for x in results]),
            "alloc+free host ms": median([x["host_ms"] for x in results]),
            "A kernel ms": median([x["a_kernel_ms"] for x in results]),
            "B next kernel start (ms after A start)": median([x["b_next_start_after_a_start_ms"] for x in results]),
            "B waited for A": f"{sum(x['b_waited_for_a'] for x in results)}/{reps}",
        })

    drv_rows, warm_rows = per_variant["cuMemAlloc+cuMemFree"], per_variant["pool, warm (threshold max)"]
    cold_rows = per_variant["pool, cold (threshold 0, trimmed)"]
    malloc_host = median([x["host_ms"] for x in drv_rows])
    pool_host = median([x["host_ms"] for x in warm_rows])
    malloc_barrier = all(x["b_waited_for_a"] for x in drv_rows) and malloc_host >= 0.5 * spin_ms
    pool_local = not any(x["b_waited_for_a"] for x in warm_rows + cold_rows)

    notes = [
        f"cuMemAlloc+cuMemFree blocked the host {malloc_host:.2f} ms of A's {spin_ms} ms kernel "
        f"({'B waited for A' if all(x['b_waited_for_a'] for x in drv_rows) else 'B did not always wait for A'}).",
        f"pool (warm) allocate+free returned in {pool_host * 1e3:.1f} us "
        f"(target <= {POOL_HOST_TARGET_MS * 1e3:.0f} us); B's next kernel "
        f"{'ran while A was still running' if pool_local else 'waited for A in some rounds'}.",
        "Where the host blocks: " + ", ".join(
            f"{r['allocator']}: alloc {r['alloc host ms']:.3f} ms, free {r['free host ms']:.3f} ms" for r in rows),
    ]
    for p in (warm_pool, cold_pool):
        p.trim(0)
    for arr, s in ((stamps_a, a), (stamps_b, b)):
        aux.free_array(arr, s)
    a.sync()
    b.sync()
    return with_claims(Result(
        experiment=NAME,
        claim=CLAIM,
        verdict=UNJUDGED,
        device=common.device_info(dev),
        params={"spin_ms": spin_ms, "repeats": reps, "allocation_bytes": nbytes, "quick": ctx.quick},
        metrics={
            "malloc_free_host_ms": malloc_host,
            "pool_warm_host_ms": pool_host,
            "pool_cold_host_ms": median([x["host_ms"] for x in cold_rows]),
            "pool_host_target_ms": POOL_HOST_TARGET_MS,
            "malloc_is_device_barrier": malloc_barrier,
            "pool_is_stream_local": pool_local,
            "rounds": per_variant,
        },
        bound=Bound("stream A kernel length", float(spin_ms), "ms"),
        ratio=malloc_host / spin_ms,
        table=rows,
        notes=notes,
    ), VERDICT_FROM)


# --------------------------------------------------------------------------- verdicts
@rule(NAME, "malloc-stalls-streams")
def _malloc_stall(d: Data) -> Judged:
    spin = float(d.p("spin_ms"))
    host = float(d.m("malloc_free_host_ms"))
    row = d.row(allocator="cuMemAlloc+cuMemFree")
    waited = str(row.get("B waited for A", ""))
    n_wait, _, n_all = waited.partition("/")
    all_waited = bool(n_all) and n_wait == n_all
    some_waited = bool(n_wait) and n_wait != "0"
    return Judged(
        measured=(f"stream B's next kernel waited for stream A's {spin:g} ms kernel in {waited} rounds; the host "
                  f"blocked {host:.1f} ms (cuMemFree {d.num(row, 'free host ms'):.2f} ms, "
                  f"cuMemAlloc {d.num(row, 'alloc host ms'):.2f} ms)"),
        bound=f"stream A's kernel = {spin:g} ms (a device-wide barrier waits all of it)", ratio=host / spin,
        verdict="supported" if (all_waited and host >= 0.5 * spin) else "partly supported" if some_waited
        else "not supported",
        target="supported: B waits for A in every round and the host blocks ≥ half of A's kernel")


@rule(NAME, "pool-stream-local",
      "cudaMallocAsync (the stream-ordered pool) is stream-local and returns in ≤ 100 µs")
def _pool_local(d: Data) -> Judged:
    warm = float(d.m("pool_warm_host_ms"))
    cold = d.m_or(None, "pool_cold_host_ms")
    target = float(d.m_or(0.1, "pool_host_target_ms"))
    local = bool(d.m("pool_is_stream_local"))
    waits = "; ".join(f"{r['allocator']}: B waited {r.get('B waited for A')}" for r in d.rows()
                      if str(r.get("allocator", "")).startswith("pool"))
    return Judged(measured=f"warm pool alloc+free {warm * 1e3:.1f} µs" + (f", cold {cold * 1e3:.0f} µs" if cold else "")
                  + (f"; {waits}" if waits else ""),
                  bound=f"target {target * 1e3:.0f} µs; stream A's kernel {d.p('spin_ms')} ms", ratio=warm / target,
                  verdict=both(local, warm <= target), target="supported: B never waits and warm alloc+free ≤ 100 µs")


# --------------------------------------------------------------------------- figure
def figures(r: dict, out: Path) -> dict[str, Path]:
    """The page's figure, drawn from the result's JSON into the folder ``out``."""
    plt = pyplot()
    rows = [x for x in r.get("table") or [] if is_num(x.get("alloc+free host ms"))]
    need(rows, "table['alloc+free host ms']")
    spin = (r.get("params") or {}).get("spin_ms")
    fig, (a1, a2) = plt.subplots(1, 2, figsize=WIDE)
    names = [x["allocator"] for x in rows]
    colors = [allocator_color(n) for n in names]
    b = a1.barh(names, [x["alloc+free host ms"] for x in rows], color=colors)
    label_bars(a1, b, "{:.3g} ms")
    a1.set_xlabel("host blocked in alloc + free (ms, log)")
    a1.set_title("what the host waits for")
    col = "B next kernel start (ms after A start)"
    b2 = a2.barh(names, [x.get(col) or 0 for x in rows], color=colors)
    for bar, x in zip(b2, rows):
        a2.annotate(f"{bar.get_width():.3g} ms · waited for A in {x.get('B waited for A', '?')}",
                    (bar.get_width(), bar.get_y() + bar.get_height() / 2), xytext=(3, 0),
                    textcoords="offset points", va="center", fontsize=8)
    a2.set_xlabel("stream B's next kernel: start after A's start (ms, log)")
    a2.set_title("does another stream have to wait?")
    for ax in (a1, a2):
        ax.set_xscale("log")
        plain_log(ax)
        if is_num(spin):
            ax.axvline(spin, color=BOUND, ls="--", lw=1.2, label=f"stream A's kernel ({spin:g} ms)")
            ax.set_xlim(right=spin * 30)
        ax.invert_yaxis()
        ax.grid(axis="x", alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    a2.set_yticks(range(len(names)), [""] * len(names))
    return {"allocation while another stream's kernel runs": save(fig, out / f"{NAME}.png")}
