"""p186: small products on the persistent rung's 128 x 128 build: do shorter stream-K runs pay? The default
(runs of >= MIN_SPLIT_SLICES = 16 K slices below one wave) against runs of >= 8 and >= 4 slices (the same policy,
hopper_gemm.MIN_SPLIT_SLICES lowered) and stream-K over every cluster (_sk_tiles = all tiles), beside cuBLAS.
bf16, CUDA-graph replay (warm: operands in L2). Results checked against float32 first."""
import statistics
import torch
from fullpipe.kernels import hopper_gemm as hg

SHAPES = [(512, 512, 512), (512, 512, 2048), (768, 768, 768), (1024, 1024, 1024), (1024, 1024, 2048),
          (1024, 2048, 1024), (1536, 1536, 1024), (2048, 2048, 512), (256, 2048, 2048), (1024, 1024, 4096)]


def graph_ms(fn, n=50):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    g.replay(); torch.cuda.synchronize()
    ts = []
    for _ in range(7):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b) / n)
    return statistics.median(ts)


def with_min(v):
    def run(a, b, c, **kw):
        old = hg.MIN_SPLIT_SLICES
        hg.MIN_SPLIT_SLICES = v
        try:
            return hg.gemm_hopper(a, b, out=c, **kw)
        finally:
            hg.MIN_SPLIT_SLICES = old
    return run


sms = torch.cuda.get_device_properties(0).multi_processor_count
print(f"{'M x N x K':>16} {'build':>22} {'cuBLAS us':>9} {'default':>8} {'min 8':>8} {'min 4':>8} {'sk all':>8}  (x cuBLAS)")
bad = 0
for m, n, k in SHAPES:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    build = hg.default_build(m, n, sms)
    tiles = hg.cluster_tiles(m, n, build)
    runs = {"default": lambda: hg.gemm_hopper(a, b, out=c),
            "min 8": lambda: with_min(8)(a, b, c),
            "min 4": lambda: with_min(4)(a, b, c),
            "sk all": lambda: hg.gemm_hopper(a, b, out=c, _sk_tiles=tiles)}
    for name, fn in runs.items():
        hg._LAUNCHES.clear()
        c.fill_(float("nan")); fn(); torch.cuda.synchronize()
        err = ((c.float() - ref).norm() / ref.norm()).item()
        if not err < 1e-2:
            bad += 1
            print("WRONG", m, n, k, name, err, flush=True)
    t_c = graph_ms(lambda: torch.matmul(a, b, out=c))
    ts = []
    for name, fn in runs.items():
        hg._LAUNCHES.clear()
        ts.append(graph_ms(fn))
    print(f"{f'{m}x{n}x{k}':>16} {build.label + f' t{tiles}':>22} {t_c * 1e3:>9.1f} "
          + " ".join(f"{t_c / t:>8.2f}" for t in ts), flush=True)
print("wrong:", bad)
