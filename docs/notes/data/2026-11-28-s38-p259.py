"""p259: held-out shapes for the long-K rule (128 x 128 tiles with stream-K instead of 128 x 64 where K is long),
and long K where 128 x 128 tiles are the default (would 128 x 256 with stream-K win there?). bf16 and fp16, b row-major
and w.T; CUDA-graph replay, 9 alternating rounds, medians."""
import dataclasses, statistics
import torch
from fullpipe.kernels import hopper_gemm as hg

SMALL12 = dataclasses.replace(hg.PERSISTENT_SMALL, cluster_n=2)
CONFIGS = {"small": hg.PERSISTENT_SMALL, "narrow": hg.PERSISTENT_NARROW, "wide": hg.PERSISTENT}
SHAPES = [(640, 640, 16384, "bf16", 0), (896, 1024, 12288, "fp16", 0), (384, 1536, 20000, "bf16", 1),
          (1024, 768, 24576, "fp16", 1), (512, 1024, 16384, "bf16", 0), (1000, 1000, 10000, "bf16", 0),
          (256, 1024, 65536, "fp16", 0), (768, 512, 12288, "bf16", 1), (512, 512, 65536, "bf16", 0),
          (1024, 1024, 10240, "bf16", 0), (640, 1280, 9216, "fp16", 1),
          (1024, 2048, 16384, "bf16", 0), (512, 4096, 16384, "bf16", 1), (1536, 1536, 12288, "fp16", 0)]


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
for m, n, k, dt, bt in SHAPES:
    dtype = torch.bfloat16 if dt == "bf16" else torch.float16
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(n, k, device="cuda", dtype=dtype).T if bt else torch.randn(k, n, device="cuda", dtype=dtype)
    c = torch.empty(m, n, device="cuda", dtype=dtype)
    ref = a.float() @ b.float()
    graphs = {"cuBLAS": graph(lambda: torch.matmul(a, b, out=c))}
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
          + " ".join(f"{med['cuBLAS'] / med[nm]:>9.3f}" for nm in names[1:]), flush=True)
print("wrong:", bad)
