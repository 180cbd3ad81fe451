"""p272: the 128 x 128 build at N = 3456, K = 5216 as M steps through one tile row (257..384: 81 tiles each):
graph of 40 with dependent launch on and off, eager loop; beside cuBLAS. --ncu M: one launch for ncu."""
import statistics, sys
import torch
from fullpipe.kernels import hopper_gemm as hg

N, K = 3456, 5216
if "--ncu" in sys.argv:
    m = int(sys.argv[-1])
    a = torch.randn(m, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, N, device="cuda", dtype=torch.bfloat16)
    hg.gemm_hopper(a, b, out=c, _build=hg.PERSISTENT_NARROW, _sk_tiles=0)
    torch.cuda.synchronize()
    sys.exit(0)


def graph(fn, n=40):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    g.replay(); torch.cuda.synchronize()
    return g


def time_us(fn_or_graph, n=40):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    if isinstance(fn_or_graph, torch.cuda.CUDAGraph):
        fn_or_graph.replay()
    else:
        for _ in range(n):
            fn_or_graph()
    b.record(); b.synchronize()
    return a.elapsed_time(b) / n * 1e3


print(f"{'M':>5} {'cuBLAS':>7} {'graph+PDL':>9} {'graph':>7} {'eager+PDL':>9} (us)")
for m in (256, 257, 258, 264, 272, 288, 320, 321, 352, 383, 384):
    a = torch.randn(m, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, N, device="cuda", dtype=torch.bfloat16)
    ours = lambda: hg.gemm_hopper(a, b, out=c, _build=hg.PERSISTENT_NARROW, _sk_tiles=0)
    res = {}
    hg.DEPENDENT_LAUNCH = True
    g_pdl = graph(ours); res["cuBLAS"] = graph(lambda: torch.matmul(a, b, out=c))
    hg.DEPENDENT_LAUNCH = False
    g_plain = graph(ours)
    hg.DEPENDENT_LAUNCH = True
    items = {"cuBLAS": res["cuBLAS"], "gpdl": g_pdl, "g": g_plain, "eager": ours}
    ts = {k_: [] for k_ in items}
    for r in range(7):
        for k_, v in (list(items.items()) if r % 2 else list(items.items())[::-1]):
            ts[k_].append(time_us(v))
    med = {k_: statistics.median(v) for k_, v in ts.items()}
    print(f"{m:>5} {med['cuBLAS']:>7.2f} {med['gpdl']:>9.2f} {med['g']:>7.2f} {med['eager']:>9.2f}", flush=True)
