"""p260: the long-K rule of default_build (session 38) on shapes in neither p258 nor p259: the default's time against
the best of the 128 x 64, 128 x 128 and 128 x 256 builds (each with the plan's stream-K). bf16 and fp16, b row-major
and w.T; CUDA-graph replay, 9 alternating rounds, medians."""
import dataclasses, statistics
import torch
from fullpipe.kernels import hopper_gemm as hg

SMALL12 = dataclasses.replace(hg.PERSISTENT_SMALL, cluster_n=2)
CONFIGS = {"small": hg.PERSISTENT_SMALL, "narrow": hg.PERSISTENT_NARROW, "wide": hg.PERSISTENT}
SHAPES = [(512, 4096, 8192, "bf16", 0), (1024, 2048, 8192, "fp16", 1), (1536, 1024, 8192, "bf16", 0),
          (2048, 1024, 12288, "fp16", 0), (1024, 1536, 9216, "bf16", 1), (1152, 896, 9216, "bf16", 0),
          (640, 768, 8192, "fp16", 0), (896, 896, 16384, "bf16", 1), (384, 2048, 32768, "bf16", 0),
          (2000, 512, 16384, "fp16", 0), (768, 768, 8192, "bf16", 0), (1024, 1024, 8192, "fp16", 1),
          (256, 3072, 16384, "bf16", 0), (1280, 640, 12288, "bf16", 1), (4096, 512, 8192, "fp16", 0),
          (768, 1280, 8192, "bf16", 0)]


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
keep = []
for m, n, k, dt, bt in SHAPES:
    dtype = torch.bfloat16 if dt == "bf16" else torch.float16
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(n, k, device="cuda", dtype=dtype).T if bt else torch.randn(k, n, device="cuda", dtype=dtype)
    c = torch.empty(m, n, device="cuda", dtype=dtype)
    ref = a.float() @ b.float()
    graphs = {"cuBLAS": graph(lambda: torch.matmul(a, b, out=c)), "default": graph(lambda: hg.gemm_hopper(a, b, out=c))}
    for nm, build in CONFIGS.items():
        fn = lambda: hg.gemm_hopper(a, b, out=c, _build=build)
        c.fill_(float("nan")); fn(); torch.cuda.synchronize()
        err = ((c.float() - ref).norm() / ref.norm()).item()
        if not err < 1e-2:
            bad += 1
            print("WRONG", m, n, k, nm, err, flush=True)
        graphs[nm] = graph(fn)
    keep.append(graphs)
    ts = {nm: [] for nm in names}
    for r in range(9):
        for nm in names[r % len(names):] + names[:r % len(names)]:
            ts[nm].append(time_us(graphs[nm]))
    med = {nm: statistics.median(v) for nm, v in ts.items()}
    print(f"{f'{m}x{n}x{k}{dt[0]}{bt}':>19} {hg.default_build(m, n, k, sms).label:>16} {med['cuBLAS']:>9.2f} "
          + " ".join(f"{med['cuBLAS'] / med[nm]:>9.3f}" for nm in names[1:])
          + f"   default/best {min(med[x] for x in CONFIGS) / med['default']:.3f}", flush=True)
print("wrong:", bad)
