"""p177: gemm_hopper's default against cuBLAS and against its 128 x 256 build (bf16, GPU time by CUDA-graph
replay), over small, thin and decode-shaped products; run once on the code before session 27 and once after
(PYTHONPATH picks the code). Every result checked against float32 first."""
import statistics
import sys
import torch
from fullpipe.kernels import hopper_gemm as hg

dev = torch.device("cuda")
SHAPES = [(1024, 1024, 1024), (1536, 1536, 1536), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
          (512, 512, 512), (512, 4096, 4096), (256, 4096, 4096), (128, 4096, 4096), (64, 4096, 4096),
          (32, 4096, 4096), (8, 4096, 4096), (8, 4096, 11008), (8, 11008, 4096), (8, 32000, 4096),
          (64, 6144, 4096), (768, 768, 8192), (1024, 1024, 4096), (2048, 1024, 8192), (256, 8192, 8192),
          (128, 11008, 4096), (1000, 4096, 4096), (3000, 1000, 2000), (200, 1032, 4104)]


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


print("code:", hg.__file__, flush=True)
print(f"{'M x N x K':>18} {'cuBLAS':>8} {'wide':>8} {'default':>8} {'wide/c':>7} {'def/c':>7}  build")
bad = 0
for m, n, k in SHAPES:
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
    out = torch.full((m, n), float("nan"), device=dev, dtype=torch.bfloat16)
    wide = hg.PERSISTENT_ONE_ROW if m <= 128 else hg.PERSISTENT
    fns = {"cuBLAS": lambda: torch.matmul(a, b, out=out),
           "wide": lambda: hg.gemm_hopper(a, b, out=out, _build=wide),
           "default": lambda: hg.gemm_hopper(a, b, out=out)}
    ref = a.float() @ b.float()
    for name, fn in fns.items():
        out.fill_(float("nan"))
        fn(); torch.cuda.synchronize()
        err = ((out.float() - ref).norm() / ref.norm()).item()
        if not err < 1e-2:
            bad += 1
            print(f"WRONG {name} {m}x{n}x{k}: rel err {err}", flush=True)
    del ref
    flop = 2.0 * m * n * k
    n_launch = max(3, min(50, int(5e12 / flop)))
    t = {x: [] for x in fns}
    for _ in range(3):
        for x in fns:
            t[x].append(graph_ms(fns[x], n_launch))
    t = {x: min(v) for x, v in t.items()}
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    label = hg.default_build(m, n, sms).label if hasattr(hg, "PERSISTENT_NARROW") else hg.default_build(m).label
    print(f"{f'{m}x{n}x{k}':>18} " + " ".join(f"{flop / t[x] / 1e9:>8.1f}" for x in fns)
          + f" {t['cuBLAS'] / t['wide']:>7.3f} {t['cuBLAS'] / t['default']:>7.3f}  {label}", flush=True)
print("wrong results:", bad)
