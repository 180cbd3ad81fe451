"""fullpipe bench cluster: share a tile through distributed shared memory.

Clusters of 4 blocks side by side along N all need the same A slice at every K
step. cluster_gemm_own_a: every block copies it from global memory;
cluster_gemm_shared_a: block rank 0 copies it and the others read it from rank 0's
shared memory (cluster.map_shared_rank). Same grid, same cluster launch, same B
loads and math: only the source of A differs. Bound: cuBLAS fp32 (TF32 off) at the
same size, same stream.
"""

from __future__ import annotations

from typing import Any

from . import Bound, Context, Result
from .gemm import device_info, rel_error, tflops, torch_on, true_fp32
from .measure import median, spread, time_on_stream

NAME = "cluster"
TITLE = "Thread-block clusters: one global load of a shared tile per cluster"
CLAIM = (
    "With 4-block clusters, the A tile every block needs is read from global memory once per cluster "
    "(through distributed shared memory) instead of once per block, and the GEMM is not slower for it"
)


def run(ctx: Context) -> Result:
    import torch

    from ..cuda.streams import create_stream
    from ..kernels import cluster as cl

    dev = ctx.device
    if not dev.facts.cluster_launch:
        return Result(NAME, CLAIM, "skipped", device_info(dev), {}, {}, notes=["this GPU has no cluster launch (needs sm_90)"])
    stream = create_stream(dev)
    n = 2048 if ctx.quick else 4096
    repeat = 5 if ctx.quick else 10
    gen = torch.Generator(device="cuda").manual_seed(1)
    a = torch.randn(n, n, device="cuda", generator=gen)
    b = torch.randn(n, n, device="cuda", generator=gen)
    out = torch.empty(n, n, device="cuda")
    torch.cuda.synchronize()
    rows: list[dict[str, Any]] = []
    metrics: dict[str, Any] = {}
    notes: list[str] = []
    with true_fp32(), torch_on(stream):
        ref = a @ b
        ts = time_on_stream(lambda: torch.matmul(a, b), stream, repeat=repeat)
    cublas = tflops(n, n, n, median(ts))
    rows.append({"kernel": "cuBLAS fp32", "A bytes from global": None, "ms": median(ts), "spread": spread(ts),
                 "TFLOP/s": cublas, "ratio vs cuBLAS": 1.0, "rel_err": None})
    ctx.progress(0.2, "cuBLAS")
    failed = []
    ms = {}
    for i, share in enumerate((False, True)):
        label = "cluster_gemm_shared_a" if share else "cluster_gemm_own_a"
        with torch_on(stream):
            out.fill_(float("nan"))
        cl.cluster_gemm(a, b, share_a=share, stream=stream, out=out)
        stream.sync()
        err = rel_error(out, ref)
        a_bytes = cl.a_slice_loads(n, n, n, share)
        if not err < 1e-4:
            failed.append(f"{label}: relative error {err:.3e} vs cuBLAS fp32")
            rows.append({"kernel": label, "A bytes from global": a_bytes, "ms": None, "spread": None,
                         "TFLOP/s": None, "ratio vs cuBLAS": None, "rel_err": err})
            continue
        ts = time_on_stream(lambda: cl.cluster_gemm(a, b, share_a=share, stream=stream, out=out), stream,
                            repeat=repeat)
        ms[share] = median(ts)
        tf = tflops(n, n, n, ms[share])
        rows.append({"kernel": label, "A bytes from global": a_bytes, "ms": ms[share], "spread": spread(ts),
                     "TFLOP/s": tf, "ratio vs cuBLAS": tf / cublas, "rel_err": err})
        metrics[f"{label}_ms"] = ms[share]
        metrics[f"{label}_a_bytes"] = a_bytes
        ctx.progress(0.3 + 0.35 * (i + 1), label)

    own_bytes, shared_bytes = cl.a_slice_loads(n, n, n, False), cl.a_slice_loads(n, n, n, True)
    metrics["a_bytes_ratio_own_over_shared"] = own_bytes / shared_bytes
    notes.append(
        f"A slices copied from global memory: {own_bytes / 2**20:.0f} MiB (every block) vs "
        f"{shared_bytes / 2**20:.0f} MiB (rank 0 per cluster) = {own_bytes / shared_bytes:.0f}x fewer, by the "
        "kernels' construction; scripts/ncu-kernels measures the global load bytes (LDGSTS) of both kernels"
    )
    ratio = None
    if failed:
        verdict = "failed"
        notes.extend(failed)
    else:
        ratio = ms[False] / ms[True]  # > 1: sharing is faster
        metrics["time_own_over_shared"] = ratio
        notes.append(f"time own_a / shared_a = {ratio:.3f} (> 1 means sharing through DSMEM is faster)")
        verdict = "supported" if ratio >= 1.0 else ("partly supported" if ratio >= 0.9 else "not supported")
        if ratio < 1.0:
            notes.append("the saved global loads mostly hit L2 anyway (the 4 blocks of a cluster read the same "
                         "A lines at about the same time); DSMEM reads and the extra cluster barrier cost more")
    return Result(NAME, CLAIM, verdict, device_info(dev),
                  {"size": n, "cluster": cl.CLUSTER, "tile": cl.TILE, "repeat": repeat}, metrics,
                  bound=Bound(f"cuBLAS fp32 {n}^3", cublas, "TFLOP/s"), ratio=ratio, table=rows, notes=notes)
