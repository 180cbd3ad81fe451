"""p271: why the 128 x 128 build runs slow per SM on irregular long-K products. Part A: per-SM rate of the
default build at a fixed tile count as K grows (no row padding: M a multiple of 128), beside cuBLAS; Part B
(--ncu): one launch each of cuBLAS and ours at the weak shapes for ncu."""
import statistics, sys
import torch
from fullpipe.kernels import hopper_gemm as hg

sms = torch.cuda.get_device_properties(0).multi_processor_count


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


if "--ncu" in sys.argv:
    for m, n, k in [(258, 3456, 5216), (384, 3456, 5216), (1024, 2048, 2048), (384, 3456, 1024)]:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        hg.gemm_hopper(a, b, out=c, _build=hg.PERSISTENT_NARROW, _sk_tiles=0)
        torch.cuda.synchronize()
        torch.matmul(a, b, out=c)
        hg.gemm_hopper(a, b, out=c, _build=hg.PERSISTENT_NARROW, _sk_tiles=0)
        torch.cuda.synchronize()
    sys.exit(0)

print(f"{'M x N x K':>18} {'tiles':>5} {'cuBLAS us':>9} {'ours us':>8} {'x cuBLAS':>8} {'TF/s ours':>9} {'TF/s cuBLAS':>11} {'TF/active SM':>12}")
shapes = []
for k in (512, 1024, 2048, 4096, 8192, 16384):
    shapes += [(384, 3456, k), (1024, 2048, k), (256, 8192, k)]
shapes += [(258, 3456, 5216), (384, 3456, 5216), (256, 3456, 5216)]
for m, n, k in shapes:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    bd = hg.PERSISTENT_NARROW
    fns = {"cuBLAS": lambda: torch.matmul(a, b, out=c), "ours": lambda: hg.gemm_hopper(a, b, out=c, _build=bd, _sk_tiles=0)}
    c.fill_(float("nan")); fns["ours"](); torch.cuda.synchronize()
    err = ((c.float() - ref).norm() / ref.norm()).item()
    assert err < 1e-2, (m, n, k, err)
    gs = {nm: graph(fn) for nm, fn in fns.items()}
    ts = {nm: [] for nm in gs}
    for r in range(7):
        for nm in (list(gs) if r % 2 else list(gs)[::-1]):
            ts[nm].append(time_us(gs[nm]))
    med = {nm: statistics.median(v) for nm, v in ts.items()}
    tiles = hg.cluster_tiles(m, n, bd)
    fl = 2 * m * n * k
    print(f"{f'{m}x{n}x{k}':>18} {tiles:>5} {med['cuBLAS']:>9.2f} {med['ours']:>8.2f} {med['cuBLAS']/med['ours']:>8.3f} "
          f"{fl/med['ours']/1e6:>9.0f} {fl/med['cuBLAS']/1e6:>11.0f} {fl/med['ours']/1e6/min(tiles, sms):>12.2f}", flush=True)
    del gs
