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

import time

import numpy as np

from ..cuda import driver as drv
from ..cuda.launch import launch
from ..cuda.pool import DevicePool
from ..cuda.streams import create_stream
from . import _alloc_common as common
from ..cuda.timing import median
from .result import Bound, Result
from ..report.claims import with_claims

NAME = "alloc-stall"
TITLE = "cudaMalloc/cudaFree vs the stream-ordered pool while another stream's kernel runs"
CLAIM = "cudaMalloc/cudaFree is a device-wide barrier; cudaMallocAsync is stream-local"

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
    pool_fast = pool_host <= POOL_HOST_TARGET_MS
    halves = [malloc_barrier, pool_local and pool_fast]
    verdict = "supported" if all(halves) else "partly supported" if any(halves) else "not supported"

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
        verdict=verdict,
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
    ))
