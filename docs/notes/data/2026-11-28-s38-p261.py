"""p261 (p249 of session 37 again, with long-K shapes and random long K): the defaults as a user meets them (gemm(variant="hopper"): the skinny kernel or the persistent rung's
default build) against cuBLAS, beside the persistent rung's 128 x 128 and 128 x 64 builds and the skinny kernel
forced; then random shapes through the default path, checked against float32. bf16, CUDA-graph replay of 40
launches, warm, 9 alternating rounds, medians."""
import random, statistics
import torch
from fullpipe.kernels import gemm
from fullpipe.kernels import hopper_gemm as hg
from fullpipe.kernels import skinny_gemm as sk

SHAPES = [(512, 512, 512), (768, 768, 768), (1000, 1000, 1000), (1024, 1024, 1024), (1024, 1024, 4096),
          (2048, 512, 2048), (384, 1024, 1024), (640, 2560, 2560), (3072, 768, 768), (4096, 1024, 1024),
          (1024, 2048, 1024), (1536, 1536, 1536), (2048, 2048, 2048), (4096, 4096, 4096),
          (72, 4096, 4096), (96, 4096, 4096), (128, 4096, 4096), (128, 2048, 2048), (96, 11008, 4096), (128, 1024, 4096),
          (768, 768, 8192), (1024, 1024, 8192), (512, 1024, 8192), (1024, 1024, 16384), (640, 640, 16384),
          (512, 512, 32768), (1024, 512, 12288), (128, 4096, 16384)]


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
print(f"{'M x N x K':>16} {'default':>18} {'cuBLAS us':>9} {'hopper':>8} {'narrow':>8} {'small':>8} {'skinny':>8}  (x cuBLAS)",
      flush=True)
bad = 0
keep = []
for m, n, k in SHAPES:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    fns = {"cuBLAS": lambda: torch.matmul(a, b, out=c), "hopper": lambda: gemm(a, b, variant="hopper", out=c, stream=torch.cuda.current_stream()),
           "narrow": lambda: hg.gemm_hopper(a, b, out=c, _build=hg.PERSISTENT_NARROW),
           "small": lambda: hg.gemm_hopper(a, b, out=c, _build=hg.PERSISTENT_SMALL)}
    if m <= sk.MAX_ROWS:
        fns["skinny"] = lambda: gemm(a, b, variant="hopper_skinny", out=c, stream=torch.cuda.current_stream())
    graphs = {}
    for nm, fn in fns.items():
        c.fill_(float("nan")); fn(); torch.cuda.synchronize()
        err = ((c.float() - ref).norm() / ref.norm()).item()
        if not err < 1e-2:
            bad += 1
            print("WRONG", m, n, k, nm, err, flush=True)
        graphs[nm] = graph(fn)
    keep.append(graphs)
    names = list(graphs)
    ts = {nm: [] for nm in names}
    for r in range(9):
        for nm in names[r % len(names):] + names[:r % len(names)]:
            ts[nm].append(time_us(graphs[nm]))
    med = {nm: statistics.median(v) for nm, v in ts.items()}
    kind = "skinny" if m <= sk.MAX_ROWS and sk.preferred(m, n, sms) else hg.default_build(m, n, k, sms).label
    print(f"{f'{m}x{n}x{k}':>16} {kind:>18} {med['cuBLAS']:>9.2f} "
          + " ".join(f"{med['cuBLAS'] / med[nm]:>8.3f}" if nm in med else f"{'':>8}"
                     for nm in ["hopper", "narrow", "small", "skinny"]), flush=True)

rng = random.Random(261)
wrong = 0
for i in range(80):
    m, n, k = rng.randint(1, 3000), 8 * rng.randint(1, 500), 8 * rng.randint(1, 500 if i % 4 else 4000)
    dt = rng.choice([torch.bfloat16, torch.float16])
    a = torch.randn(m, k, device="cuda", dtype=dt)
    if rng.random() < 0.5:
        b = torch.randn(n, k, device="cuda", dtype=dt).T
    else:
        b = torch.randn(k, n, device="cuda", dtype=dt)
    out = gemm(a, b, variant="hopper", stream=torch.cuda.current_stream())
    ref = a.float() @ b.float()
    err = ((out.float() - ref).norm() / ref.norm()).item()
    if not err < 1e-2 or torch.isnan(out).any():
        wrong += 1
        print("WRONG random", m, n, k, dt, err, flush=True)
print(f"random shapes: {wrong} wrong of 80; table: {bad} wrong")
