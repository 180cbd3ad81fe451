"""p164: the persistent Hopper GEMM's host time per call and its GPU time (CUDA-graph replay), against cuBLAS."""
import cProfile, pstats, statistics, sys, time, io
import torch
from fullpipe.kernels import gemm
from fullpipe.kernels import hopper_gemm as hg

dev = torch.device("cuda")
SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (3072, 3072, 3072), (2048, 2048, 2048), (1024, 1024, 1024),
          (2048, 4096, 4096), (512, 4096, 4096), (128, 4096, 4096), (16384, 1024, 1024), (1000, 4096, 4096),
          (4224, 8128, 4160), (6144, 6144, 6144), (4096, 11008, 4096)]


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


print(f"{'M x N x K':>18} {'waves':>6} {'host us':>8} {'torch host':>10} {'cuBLAS':>7} {'ours':>7} {'ratio':>6}")
for m, n, k in SHAPES:
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
    out = torch.empty((m, n), device=dev, dtype=torch.bfloat16)
    ours = lambda: gemm(a, b, variant="hopper_persistent", stream=None, out=out) if False else hg.gemm_hopper(a, b, out=out)
    cub = lambda: torch.matmul(a, b, out=out)
    ours(); torch.cuda.synchronize()
    reps = 300
    t0 = time.perf_counter()
    for _ in range(reps):
        ours()
    host = (time.perf_counter() - t0) / reps * 1e6
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        cub()
    thost = (time.perf_counter() - t0) / reps * 1e6
    torch.cuda.synchronize()
    flop = 2.0 * m * n * k
    n_launch = max(3, min(50, int(5e12 / flop)))
    to = graph_ms(ours, n_launch)
    tc = graph_ms(cub, n_launch)
    print(f"{f'{m}x{n}x{k}':>18} {hg.cluster_tiles(m, n) / 66:>6.2f} {host:>8.1f} {thost:>10.1f} {flop / tc / 1e9:>7.1f} "
          f"{flop / to / 1e9:>7.1f} {tc / to:>6.3f}", flush=True)

a = torch.randn(2048, 2048, device=dev, dtype=torch.bfloat16); b = torch.randn(2048, 2048, device=dev, dtype=torch.bfloat16)
out = torch.empty((2048, 2048), device=dev, dtype=torch.bfloat16)
pr = cProfile.Profile()
pr.enable()
for _ in range(2000):
    hg.gemm_hopper(a, b, out=out)
pr.disable()
torch.cuda.synchronize()
st = io.StringIO()
pstats.Stats(pr, stream=st).sort_stats("tottime").print_stats(25)
print(st.getvalue()[:6000])
