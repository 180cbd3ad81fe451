"""p189: stream-K's rule above one wave (hopper_gemm.stream_k: the last partial wave and the one before dealt out as
K runs where whole tiles keep the clusters busy < SK_BELOW_BUSY = 0.88) against whole tiles, on the shapes it
picks, timed in 9 interleaved rounds (CUDA-graph replays of 20 launches; median), beside cuBLAS. bf16."""
import statistics
import torch
from fullpipe.kernels import hopper_gemm as hg

SHAPES = [(1024, 11008, 4096), (1024, 14336, 4096), (2048, 11008, 4096), (2560, 4096, 4096), (3072, 3072, 3072),
          (5120, 5120, 5120)]
sms = torch.cuda.get_device_properties(0).multi_processor_count


def graph(fn, n=20):
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


def replay_ms(g, n=20):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); g.replay(); b.record(); b.synchronize()
    return a.elapsed_time(b) / n


print(f"{'M x N x K':>18} {'tiles':>5} {'busy':>5} {'sk':>4} {'cuBLAS us':>9} {'stream-K':>9} {'whole':>7} "
      f"{'sk/whole':>8}   (x cuBLAS; medians of 9 rounds)")
for m, n, k in SHAPES:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    build = hg.default_build(m, n, sms)
    tiles = hg.cluster_tiles(m, n, build)
    clusters = hg.max_active_clusters(0, "sm_90a", build)
    sk, _ = hg.stream_k(tiles, clusters, -(-k // 64))
    waves = -(-tiles // clusters)
    fns = {"cuBLAS": lambda: torch.matmul(a, b, out=c), "sk": lambda: hg.gemm_hopper(a, b, out=c),
           "whole": lambda: hg.gemm_hopper(a, b, out=c, _sk_tiles=0)}
    for name in ("sk", "whole"):
        c.fill_(float("nan")); fns[name](); torch.cuda.synchronize()
        assert ((c.float() - ref).norm() / ref.norm()).item() < 1e-2, (m, n, k, name)
    gs = {name: graph(fn) for name, fn in fns.items()}
    t = {name: [] for name in gs}
    names = list(gs)
    for r in range(9):
        for name in names[r % 3:] + names[:r % 3]:
            t[name].append(replay_ms(gs[name]))
    med = {name: statistics.median(v) for name, v in t.items()}
    print(f"{f'{m}x{n}x{k}':>18} {tiles:>5} {tiles / (waves * clusters):>5.2f} {sk:>4} {med['cuBLAS'] * 1e3:>9.1f} "
          f"{med['cuBLAS'] / med['sk']:>9.3f} {med['cuBLAS'] / med['whole']:>7.3f} {med['whole'] / med['sk']:>8.3f}",
          flush=True)
