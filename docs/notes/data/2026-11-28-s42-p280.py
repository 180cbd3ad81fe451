"""p280: the skinny kernel as committed (session 40's cut only in 64/128-row builds, 16-row threshold) against
cuBLAS on p279's shapes. CUDA-graph replay of 40, 7 alternating rounds, medians."""
import statistics
import torch
from fullpipe.kernels import skinny_gemm as sk


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


def time_us(g, n=40):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); g.replay(); b.record(); b.synchronize()
    return a.elapsed_time(b) / n * 1e3


print(f"{'M x N x K':>16} {'box':>4} {'cuBLAS':>7} {'skinny':>7} {'x cuBLAS':>8} (us)")
for m, n, k in ((33, 4096, 4096), (40, 4096, 4096), (64, 4096, 4096), (65, 4096, 4096), (72, 4096, 4096),
                (100, 4096, 4096), (128, 4096, 4096), (33, 11008, 4096), (17, 4096, 4096), (8, 4096, 4096),
                (24, 8192, 2048), (48, 2048, 8192), (120, 4096, 4096)):
    box = sk.rows_build(m)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    gs = {"cuBLAS": graph(lambda: torch.matmul(a, b, out=c))}
    fn = lambda: sk.gemm_skinny(a, b, out=c)
    c.fill_(float("nan")); fn(); torch.cuda.synchronize()
    assert ((c.float() - ref).norm() / ref.norm()).item() < 1e-2
    gs["skinny"] = graph(fn)
    ts = {k_: [] for k_ in gs}
    for r in range(7):
        for k_ in (list(gs) if r % 2 else list(gs)[::-1]):
            ts[k_].append(time_us(gs[k_]))
    med = {k_: statistics.median(v) for k_, v in ts.items()}
    print(f"{f'{m}x{n}x{k}':>16} {box:>4} {med['cuBLAS']:>7.2f} {med['skinny']:>7.2f} {med['cuBLAS']/med['skinny']:>8.2f}", flush=True)
