"""p166: whole-tile GPU time (graph replay) of the persistent rung at the benchmark's sizes, for A/B of kernel sources."""
import statistics, sys
import torch
import fullpipe
from fullpipe.kernels import hopper_gemm as hg
print(fullpipe.__file__)
kw = {"_sk_tiles": 0} if "_sk_tiles" in hg.gemm_hopper.__code__.co_varnames else {}


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
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b) / n)
    return statistics.median(ts)


for m, n, k in [(8192, 8192, 8192), (4096, 4096, 4096), (2048, 4096, 4096)]:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16); b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    f = 2.0 * m * n * k
    nl = max(3, min(30, int(5e12 / f)))
    r = []
    for _ in range(2):
        tc = graph_ms(lambda: torch.matmul(a, b, out=out), nl)
        to = graph_ms(lambda: hg.gemm_hopper(a, b, out=out, **kw), nl)
        r.append((tc, to))
    print(f"{m}x{n}x{k}: " + "  ".join(f"cuBLAS {f / tc / 1e9:.0f} ours {f / to / 1e9:.0f} ({tc / to:.3f})" for tc, to in r), flush=True)
