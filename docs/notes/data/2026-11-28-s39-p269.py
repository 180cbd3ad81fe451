"""p269: stream-K over every SM below one wave. Where a build's tiles are fewer than the SMs and the equal split
(stream_k) cannot double them (tiles x 2 > SMs), whole tiles leave SMs idle; dealing all tiles' K slices out over
every cluster (sk_tiles = tiles) uses them all at the price of partial sums. bf16, graph replay of 40, 7 rounds."""
import statistics
import torch
from fullpipe.kernels import hopper_gemm as hg

sms = torch.cuda.get_device_properties(0).multi_processor_count
SHAPES = [(258, 3456, 5216), (300, 3648, 6592), (538, 2504, 7640), (282, 4080, 3264), (162, 7040, 7104),
          (501, 2536, 6944), (200, 4336, 6568), (1024, 1024, 4096), (1024, 2048, 2048), (640, 2048, 4096),
          (320, 4096, 4096), (768, 1024, 8192), (1088, 1024, 4096), (2000, 1000, 2048), (4096, 512, 4096)]


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


print(f"{'M x N x K':>16} {'default':>20} {'cuBLAS us':>9}  default | 128x128: whole  all-SK (tiles) | 64x128: whole  all-SK (tiles)  (x cuBLAS)")
bad = 0
for m, n, k in SHAPES:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    fns = {"cuBLAS": lambda: torch.matmul(a, b, out=c), "default": lambda: hg.gemm_hopper(a, b, out=c)}
    tiles = {}
    for nm, bd in (("n", hg.PERSISTENT_NARROW), ("m", hg.PERSISTENT_M64_N128)):
        t = hg.cluster_tiles(m, n, bd)
        tiles[nm] = t
        fns[nm + "whole"] = (lambda bd: lambda: hg.gemm_hopper(a, b, out=c, _build=bd, _sk_tiles=0))(bd)
        if t < sms:
            fns[nm + "sk"] = (lambda bd, t: lambda: hg.gemm_hopper(a, b, out=c, _build=bd, _sk_tiles=t))(bd, t)
    for nm, fn in fns.items():
        c.fill_(float("nan")); fn(); torch.cuda.synchronize()
        err = ((c.float() - ref).norm() / ref.norm()).item()
        if not err < 1e-2:
            bad += 1
            print("WRONG", m, n, k, nm, err, flush=True)
    graphs = {nm: graph(fn) for nm, fn in fns.items()}
    names = list(fns)
    ts = {nm: [] for nm in names}
    for r in range(7):
        for nm in names[r % len(names):] + names[:r % len(names)]:
            ts[nm].append(time_us(graphs[nm]))
    med = {nm: statistics.median(v) for nm, v in ts.items()}
    cb = med["cuBLAS"]
    x = lambda nm: f"{cb / med[nm]:.3f}" if nm in med else "  -  "
    print(f"{f'{m}x{n}x{k}':>16} {hg.default_build(m, n, k, sms).label:>20} {cb:>9.2f}  {x('default')}  |  {x('nwhole')}  {x('nsk')} ({tiles['n']:3d})  |  "
          f"{x('mwhole')}  {x('msk')} ({tiles['m']:3d})", flush=True)
    del graphs
print("wrong:", bad)
