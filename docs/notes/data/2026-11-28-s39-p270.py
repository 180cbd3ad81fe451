"""p270: at few rows, the skinny kernel (gemm(variant="hopper") where skinny_gemm.preferred) against the persistent
rung's default build (now with 64-row tiles), beside cuBLAS: a grid (M 32-128, N 512-8192, K 512-3072) to place a
K threshold, and 40 random shapes drawn after it to judge the rule on. bf16, CUDA-graph replay of 40 launches, warm,
7 alternating rounds, medians; results checked first. Writes JSON."""
import json, random, statistics, sys
import torch
from fullpipe.kernels import hopper_gemm as hg
from fullpipe.kernels import skinny_gemm as sk

GRID = [(m, n, k) for k in (512, 1024, 1536, 2048, 3072) for m in (32, 64, 96, 128) for n in (512, 1024, 2048, 4096, 8192)]
rng = random.Random(270)
HELD = [(rng.randint(33, 128), rng.randrange(256, 8449, 8), rng.randrange(256, 6145, 8)) for _ in range(40)]


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


rows, bad = [], 0
print(f"{'set':>5} {'M x N x K':>16} {'cuBLAS us':>9} {'skinny':>7} {'persist':>7}  (x cuBLAS)  build")
for tag, shapes in (("grid", GRID), ("held", HELD)):
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        ref = a.float() @ b.float()
        fns = {"cuBLAS": lambda: torch.matmul(a, b, out=c),
               "skinny": lambda: sk.gemm_skinny(a, b, out=c, stream=torch.cuda.current_stream()),
               "persistent": lambda: hg.gemm_hopper(a, b, out=c)}
        for nm, fn in fns.items():
            c.fill_(float("nan")); fn(); torch.cuda.synchronize()
            err = ((c.float() - ref).norm() / ref.norm()).item()
            if not err < 1e-2:
                bad += 1
                print("WRONG", m, n, k, nm, err, flush=True)
        graphs = {nm: graph(fn) for nm, fn in fns.items()}
        names = list(fns)
        ts = {nm: [] for nm in names}
        for r in range(7):
            for nm in names[r % len(names):] + names[:r % len(names)]:
                ts[nm].append(time_us(graphs[nm]))
        med = {nm: statistics.median(v) for nm, v in ts.items()}
        cb = med["cuBLAS"]
        rows.append({"set": tag, "m": m, "n": n, "k": k, "us": med, "preferred": sk.preferred(m, n, 132)})
        print(f"{tag:>5} {f'{m}x{n}x{k}':>16} {cb:>9.2f} {cb / med['skinny']:>7.3f} {cb / med['persistent']:>7.3f}"
              f"  {hg.default_build(m, n, k, 132).label}", flush=True)
        del graphs
json.dump(rows, open(sys.argv[1], "w"), indent=1)
print("wrong:", bad)
