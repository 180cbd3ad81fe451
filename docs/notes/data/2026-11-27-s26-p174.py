"""p174: the decoder's projections (M = 5886 tokens, 8 requests) by CUDA-graph replay and per call with host time:
whole tiles, the default (stream-K where chosen) and torch.matmul."""
import statistics, time
import torch
from fullpipe.kernels import hopper_gemm as hg


def graph_ms(fn, n=20):
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


def call_ms(fn, reps=7):
    ts = []
    for i in range(reps + 2):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize()
        if i >= 2:
            ts.append(a.elapsed_time(b))
    return statistics.median(ts)


for m, k, n in [(5886, 2048, 6144), (5886, 2048, 2048), (5886, 2048, 11264), (5886, 5632, 2048), (5886, 2048, 32000), (8, 2048, 32000)]:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16); w = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    p = hg.plan("persistent", m, n, k, "bfloat16", max_clusters=66)
    tt = graph_ms(lambda: torch.matmul(a, w, out=out))
    tw = graph_ms(lambda: hg.gemm_hopper(a, w, out=out, _sk_tiles=0))
    td = graph_ms(lambda: hg.gemm_hopper(a, w, out=out))
    ct = call_ms(lambda: torch.matmul(a, w, out=out))
    cd = call_ms(lambda: hg.gemm_hopper(a, w, out=out))
    print(f"({m}, {k}, {n}) sk {p.sk_tiles:3d} | replay ms: torch {tt:.3f} whole {tw:.3f} ({tt / tw:.2f}) default {td:.3f} "
          f"({tt / td:.2f}) | one call: torch {ct:.3f} ours {cd:.3f} ({ct / cd:.2f})", flush=True)
