"""p165: stream-K and the cached launch: GPU time (CUDA-graph replay) of whole tiles, stream-K and cuBLAS,
and host time per call, over shapes a user would try (bf16)."""
import statistics, sys, time
import torch
from fullpipe.kernels import hopper_gemm as hg

dev = torch.device("cuda")
SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (6144, 6144, 6144), (3072, 3072, 3072), (2048, 2048, 2048),
          (1024, 1024, 1024), (2048, 4096, 4096), (4096, 11008, 4096), (512, 4096, 4096), (128, 4096, 4096),
          (16384, 1024, 1024), (1000, 4096, 4096), (4224, 8128, 4160), (4096, 4096, 1024), (256, 8192, 8192),
          (5120, 5120, 5120), (2560, 2560, 10240), (768, 768, 8192)]


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


print(f"{'M x N x K':>18} {'waves':>5} {'sk':>4} {'host':>6} {'t.host':>6} {'cuBLAS':>7} {'whole':>7} {'sk':>7} "
      f"{'whole/c':>7} {'sk/c':>6} {'err':>7}")
rows = []
for m, n, k in SHAPES:
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
    out = torch.full((m, n), float("nan"), device=dev, dtype=torch.bfloat16)
    hg.gemm_hopper(a, b, out=out); torch.cuda.synchronize()
    ref = a.float() @ b.float()
    err = ((out.float() - ref).norm() / ref.norm()).item()
    del ref
    p = hg.plan("persistent", m, n, k, "bfloat16", max_clusters=66)
    ours = lambda: hg.gemm_hopper(a, b, out=out)
    whole = lambda: hg.gemm_hopper(a, b, out=out, _sk_tiles=0)
    cub = lambda: torch.matmul(a, b, out=out)
    reps = 300
    torch.cuda.synchronize()
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
    tc, tw, ts = [], [], []
    for _ in range(2):
        tc.append(graph_ms(cub, n_launch)); tw.append(graph_ms(whole, n_launch)); ts.append(graph_ms(ours, n_launch))
    tc, tw, ts = min(tc), min(tw), min(ts)
    f = lambda t: flop / t / 1e9
    print(f"{f'{m}x{n}x{k}':>18} {hg.cluster_tiles(m, n) / 66:>5.2f} {p.sk_tiles:>4} {host:>6.1f} {thost:>6.1f} "
          f"{f(tc):>7.1f} {f(tw):>7.1f} {f(ts):>7.1f} {tc / tw:>7.3f} {tc / ts:>6.3f} {err:>7.1e}", flush=True)
