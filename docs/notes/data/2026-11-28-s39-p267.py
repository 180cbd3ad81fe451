"""p267: a sweep of small products over the persistent builds with 64- and 128-row tiles, beside cuBLAS, the
default build and gemm(variant="hopper") (the skinny kernel where it is preferred). bf16, CUDA-graph replay of 40
launches (dependent launches on), warm, 7 alternating rounds, medians; results checked first. Writes JSON."""
import dataclasses, json, statistics, sys
import torch
from fullpipe.kernels import hopper_gemm as hg
from fullpipe.kernels import gemm as fgemm  # (the function)

M64 = dataclasses.replace(hg.PERSISTENT_SMALL, tile_m=64, stages=8)
CONFIGS = {"m128n64": hg.PERSISTENT_SMALL, "m128n128": hg.PERSISTENT_NARROW,
           "m64n64s8": M64, "m64n64s6": dataclasses.replace(M64, stages=6),
           "m64n128s8": dataclasses.replace(M64, tile_n=128), "m64n128s6": dataclasses.replace(M64, tile_n=128, stages=6)}
sms = torch.cuda.get_device_properties(0).multi_processor_count
if len(sys.argv) > 2:
    SHAPES = [tuple(map(int, s.split("x"))) for s in sys.argv[2:]]
else:
    SHAPES = []
    for k in (1024, 4096, 8192):
        for m in (64, 96, 128, 192, 256, 320, 384, 512, 640, 768, 896, 1024):
            for n in (1024, 2048, 4096, 8192):
                b = hg.default_build(m, n, k, sms)
                if b.tile_n == 256 or (m >= 768 and n >= 4096):
                    continue
                SHAPES.append((m, n, k))


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


names = ["cuBLAS", "default", "auto"] + list(CONFIGS)
print(len(SHAPES), "shapes")
print(f"{'M x N x K':>16} {'default':>16} {'cuBLAS us':>9} " + " ".join(f"{n[:9]:>9}" for n in names[1:]) + "  (x cuBLAS)", flush=True)
bad, rows = 0, []
for m, n, k in SHAPES:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    fns = {"cuBLAS": lambda: torch.matmul(a, b, out=c), "default": lambda: hg.gemm_hopper(a, b, out=c),
           "auto": lambda: fgemm(a, b, variant="hopper", out=c, stream=torch.cuda.current_stream())}
    for nm, build in CONFIGS.items():
        fns[nm] = (lambda bd: lambda: hg.gemm_hopper(a, b, out=c, _build=bd))(build)
    for nm, fn in fns.items():
        c.fill_(float("nan")); fn(); torch.cuda.synchronize()
        err = ((c.float() - ref).norm() / ref.norm()).item()
        if not err < 1e-2:
            bad += 1
            print("WRONG", m, n, k, nm, err, flush=True)
    graphs = {nm: graph(fn) for nm, fn in fns.items()}
    ts = {nm: [] for nm in names}
    for r in range(7):
        for nm in names[r % len(names):] + names[:r % len(names)]:
            ts[nm].append(time_us(graphs[nm]))
    med = {nm: statistics.median(v) for nm, v in ts.items()}
    rows.append({"m": m, "n": n, "k": k, "default": hg.default_build(m, n, k, sms).label, "us": med})
    print(f"{f'{m}x{n}x{k}':>16} {hg.default_build(m, n, k, sms).label:>16} {med['cuBLAS']:>9.2f} "
          + " ".join(f"{med['cuBLAS'] / med[nm]:>9.3f}" for nm in names[1:]), flush=True)
    del graphs, a, b, c, ref
json.dump(rows, open(sys.argv[1], "w"), indent=1)
print("wrong:", bad)
