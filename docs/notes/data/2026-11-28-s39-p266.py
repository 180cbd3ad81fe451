"""p266: 64-row tiles (one consumer warpgroup, TILE_M 64) against the default build at small products, beside
cuBLAS (which runs 64 x 64 and 64 x 48 tiles there, p265). bf16, CUDA-graph replay of 40 launches (dependent
launches on), warm, 9 alternating rounds, medians; results checked first (poisoned outputs)."""
import dataclasses, statistics, sys
import torch
from fullpipe.kernels import hopper_gemm as hg

M64 = dataclasses.replace(hg.PERSISTENT_SMALL, tile_m=64, stages=12)
CONFIGS = {"m64n64": M64, "m64n64s8": dataclasses.replace(M64, stages=8),
           "m64n128": dataclasses.replace(M64, tile_n=128, stages=8), "m128n64": hg.PERSISTENT_SMALL,
           "m128n128": hg.PERSISTENT_NARROW}
SHAPES = [(512, 512, 512), (512, 512, 4096), (512, 512, 16384), (384, 1024, 4096), (256, 2048, 2048),
          (128, 4096, 4096), (128, 11008, 4096), (192, 4096, 4096), (256, 4096, 4096), (64, 4096, 4096),
          (768, 768, 8192), (1024, 1024, 1024), (1024, 1024, 4096), (200, 3000, 4096), (640, 640, 2048),
          (96, 8192, 2048), (1024, 512, 8192), (2048, 1024, 2048)]
if len(sys.argv) > 1:
    SHAPES = [tuple(map(int, s.split("x"))) for s in sys.argv[1:]]


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
names = ["cuBLAS", "default"] + list(CONFIGS)
print(f"{'M x N x K':>16} {'default':>16} {'cuBLAS us':>9} " + " ".join(f"{n:>9}" for n in names[1:]) + "  (x cuBLAS)", flush=True)
bad = 0
for m, n, k in SHAPES:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    fns = {"cuBLAS": lambda: torch.matmul(a, b, out=c), "default": lambda: hg.gemm_hopper(a, b, out=c)}
    for nm, build in CONFIGS.items():
        fns[nm] = (lambda bd: lambda: hg.gemm_hopper(a, b, out=c, _build=bd))(build)
    for nm, fn in fns.items():
        c.fill_(float("nan")); fn(); torch.cuda.synchronize()
        err = ((c.float() - ref).norm() / ref.norm()).item()
        if not err < 1e-2:
            bad += 1
            print("WRONG", m, n, k, nm, err, flush=True)
    graphs = {nm: graph(fn) for nm, fn in fns.items()}
    ts = {nm: [] for nm in names}
    for r in range(9):
        for nm in names[r % len(names):] + names[:r % len(names)]:
            ts[nm].append(time_us(graphs[nm]))
    med = {nm: statistics.median(v) for nm, v in ts.items()}
    print(f"{f'{m}x{n}x{k}':>16} {hg.default_build(m, n, k, sms).label:>16} {med['cuBLAS']:>9.2f} "
          + " ".join(f"{med['cuBLAS'] / med[nm]:>9.3f}" for nm in names[1:]), flush=True)
    del graphs
print("wrong:", bad)
