"""p176: 128 x 128 block tiles (tile_n=128) against the 128 x 256 default and cuBLAS, GPU time by
CUDA-graph replay (bf16), over small and thin products; every build checked against float32 first."""
import statistics
import torch
from fullpipe.kernels import hopper_gemm as hg

dev = torch.device("cuda")
SHAPES = [(1024, 1024, 1024), (1536, 1536, 1536), (2048, 2048, 2048), (3072, 3072, 3072), (4096, 4096, 4096),
          (512, 512, 512), (2048, 2048, 512), (512, 4096, 4096), (256, 4096, 4096), (128, 4096, 4096),
          (64, 4096, 4096), (8, 4096, 4096), (768, 768, 8192), (1024, 1024, 4096), (16384, 1024, 1024),
          (2048, 1024, 8192), (1000, 4096, 4096), (4096, 4096, 1024), (256, 8192, 8192), (128, 11008, 4096),
          (1024, 4096, 1024), (3000, 1000, 2000)]
N128 = hg.PersistentBuild(tile_n=128, stages=6)
N128_1 = hg.PersistentBuild(tile_n=128, stages=6, cluster_m=1)
N128_S4 = hg.PersistentBuild(tile_n=128, stages=4)


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


names = ["cuBLAS", "default", "n128", "n128-whole", "n128-1x1", "n128-s4"]
print(f"{'M x N x K':>18} " + " ".join(f"{x:>10}" for x in names) + "   (TFLOP/s; x cuBLAS below)  worst err")
bad = 0
for m, n, k in SHAPES:
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
    out = torch.full((m, n), float("nan"), device=dev, dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    fns = {
        "cuBLAS": lambda: torch.matmul(a, b, out=out),
        "default": lambda: hg.gemm_hopper(a, b, out=out),
        "n128": lambda: hg.gemm_hopper(a, b, out=out, _build=N128),
        "n128-whole": lambda: hg.gemm_hopper(a, b, out=out, _build=N128, _sk_tiles=0),
        "n128-1x1": lambda: hg.gemm_hopper(a, b, out=out, _build=N128_1),
        "n128-s4": lambda: hg.gemm_hopper(a, b, out=out, _build=N128_S4),
    }
    worst = 0.0
    for name, fn in fns.items():
        out.fill_(float("nan"))
        fn(); torch.cuda.synchronize()
        err = ((out.float() - ref).norm() / ref.norm()).item()
        if not err < 1e-2:
            bad += 1
            print(f"WRONG {name} {m}x{n}x{k}: rel err {err}", flush=True)
        worst = max(worst, err) if err == err else float("inf")
    del ref
    flop = 2.0 * m * n * k
    n_launch = max(3, min(50, int(5e12 / flop)))
    t = {x: [] for x in names}
    for _ in range(2):
        for x in names:
            t[x].append(graph_ms(fns[x], n_launch))
    t = {x: min(v) for x, v in t.items()}
    tf = " ".join(f"{flop / t[x] / 1e9:>10.1f}" for x in names)
    rel = " ".join(f"{t['cuBLAS'] / t[x]:>10.3f}" for x in names)
    print(f"{f'{m}x{n}x{k}':>18} {tf}   {worst:.1e}\n{'':>18} {rel}", flush=True)
print("wrong results:", bad)
