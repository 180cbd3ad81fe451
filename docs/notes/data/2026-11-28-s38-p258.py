"""p258: long K at few tiles: the 128 x 64 build (one wave, no split) against the 128 x 128 build with stream-K
(the plan's split) over K, at the shapes where default_build takes 128 x 64 tiles. Where does 128 x 128 + stream-K
win (fewer L2 reads a FLOP against its partial sums)? bf16, CUDA-graph replay, 9 alternating rounds, medians."""
import dataclasses, statistics
import torch
from fullpipe.kernels import hopper_gemm as hg

SMALL12 = dataclasses.replace(hg.PERSISTENT_SMALL, cluster_n=2)
CONFIGS = {"small": hg.PERSISTENT_SMALL, "narrow": hg.PERSISTENT_NARROW}
SHAPES = [(m, n, k) for m, n in ((512, 512), (768, 768), (1024, 1024), (1024, 512), (256, 2048), (128, 4096))
          for k in (4096, 6144, 8192, 12288, 16384, 32768)]


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
for m, n, k in SHAPES:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
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
    print(f"{f'{m}x{n}x{k}':>16} {hg.default_build(m, n, sms).label:>16} {med['cuBLAS']:>9.2f} "
          + " ".join(f"{med['cuBLAS'] / med[nm]:>9.3f}" for nm in names[1:]), flush=True)
print("wrong:", bad)
