"""p252: 64 x 128 tiles whose two consumer warpgroups split K (m64n128k16, every other slice each, summed through
shared memory) against 128 x 64 tiles (m64n64k16, each warpgroup its 64 rows), the 128 x 128 build and cuBLAS.
bf16, CUDA-graph replay of 40 launches, warm, 9 alternating rounds, medians; results checked first."""
import statistics
import torch
from fullpipe.kernels import hopper_gemm as hg

KSPLIT = hg.PersistentBuild(cluster_m=1, tile_n=128, stages=6, k_split=True)
CONFIGS = {"narrow": hg.PERSISTENT_NARROW, "small": hg.PERSISTENT_SMALL, "ksplit": KSPLIT}
SHAPES = [(512, 512, 512), (768, 768, 768), (1000, 1000, 1000), (1024, 1024, 1024), (1024, 1024, 4096),
          (2048, 512, 2048), (384, 1024, 1024), (256, 4096, 4096), (768, 768, 8192), (1024, 1024, 8192),
          (1024, 2048, 1024), (512, 4096, 4096), (128, 4096, 4096), (64, 4096, 4096), (200, 264, 72)]


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


sms = torch.cuda.get_device_properties(0).multi_processor_count
names = ["cuBLAS"] + list(CONFIGS)
print(f"{'M x N x K':>16} {'default':>16} {'cuBLAS us':>9} " + " ".join(f"{n:>9}" for n in names[1:]) + "  (x cuBLAS)", flush=True)
bad = 0
keep = []
for m, n, k in SHAPES:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    graphs = {"cuBLAS": graph(lambda: torch.matmul(a, b, out=c))}
    for nm, build in CONFIGS.items():
        fn = lambda: hg.gemm_hopper(a, b, out=c, _build=build)
        c.fill_(float("nan")); fn(); torch.cuda.synchronize()
        err = ((c.float() - ref).norm() / ref.norm()).item()
        if not err < 1e-2 or torch.isnan(c).any():
            bad += 1
            print("WRONG", m, n, k, nm, err, flush=True)
        graphs[nm] = graph(fn)
    keep.append(graphs)
    ts = {nm: [] for nm in names}
    for r in range(9):
        for nm in names[r % len(names):] + names[:r % len(names)]:
            ts[nm].append(time_us(graphs[nm]))
    med = {nm: statistics.median(v) for nm, v in ts.items()}
    p = hg.plan("persistent", m, n, k, "bfloat16", max_clusters=sms, build=KSPLIT)
    print(f"{f'{m}x{n}x{k}':>16} {hg.default_build(m, n, sms).label:>16} {med['cuBLAS']:>9.2f} "
          + " ".join(f"{med['cuBLAS'] / med[nm]:>9.3f}" for nm in names[1:]) + f"   (ksplit grid {p.grid} sk {p.sk_tiles})",
          flush=True)
print("wrong:", bad)
