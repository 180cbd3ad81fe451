"""p170: stream-K runs aligned to tile chunks (split-K-like) against arbitrary runs and whole tiles (graph replay)."""
import statistics
import sys
import torch
from fullpipe.kernels import hopper_gemm as hg


def graph_ms(fn, n):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        fn(); fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    g.replay(); torch.cuda.synchronize()
    ts = []
    for _ in range(7):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b) / n)
    return statistics.median(ts)


SHAPES = [(512, 4096, 4096), (1024, 1024, 1024), (128, 4096, 4096), (768, 768, 8192), (256, 8192, 8192),
          (1024, 1024, 4096), (512, 512, 16384), (2048, 1024, 8192)]
CASES = []
for m, n, k in SHAPES:
    T, S = hg.cluster_tiles(m, n), -(-k // 64)
    mins = sorted({S // s for s in (2, 4, 8, 16) if T * s <= 66 and S // s >= 2} | {8})
    CASES.append(((m, n, k), mins))
CASES += [((2560, 2560, 10240), (8,)), ((3072, 3072, 3072), (8,)), ((5120, 5120, 5120), (8,)), ((4224, 8128, 4160), (8,)),
          ((6144, 6144, 6144), (8,))]
for (m, n, k), mins in CASES:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16); b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    f = 2.0 * m * n * k
    nl = max(5, min(50, int(5e12 / f)))
    tc = graph_ms(lambda: torch.matmul(a, b, out=out), nl)
    tw = graph_ms(lambda: hg.gemm_hopper(a, b, out=out, _sk_tiles=0), nl)
    line = f"{m}x{n}x{k}: cuBLAS {f / tc / 1e9:.0f}  whole {f / tw / 1e9:.0f} ({tc / tw:.3f})"
    for mn in mins:
        hg.MIN_RUN_SLICES = mn
        hg._LAUNCHES.clear()
        p = hg.plan("persistent", m, n, k, "bfloat16", max_clusters=66)
        ts = graph_ms(lambda: hg.gemm_hopper(a, b, out=out), nl)
        err = float((out.float() - ref).norm() / ref.norm())
        line += f" | min {mn}: sk {p.sk_tiles} cl {p.clusters} {f / ts / 1e9:.0f} ({tc / ts:.3f}) e{err:.0e}"
    hg.MIN_RUN_SLICES = 8
    T = hg.cluster_tiles(m, n)
    if T > 66 and T % 66:
        hg._LAUNCHES.clear()
        forced = 66 + T % 66
        ts = graph_ms(lambda: hg.gemm_hopper(a, b, out=out, _sk_tiles=forced), nl)
        line += f" | forced sk {forced}: {f / ts / 1e9:.0f} ({tc / ts:.3f})"
    print(line, flush=True)
