"""p286 (session 43): held-out check of stream-K at one wave and a nearly empty second (hopper_gemm.stream_k,
waves >= 1). Random products (seed 286; M 33-6000, N and K 256-12288, a quarter fp16, a quarter b = w.T) drawn
until 28 whose default plan the change alters; each timed in CUDA-graph replay of 40 launches, 7 alternating
rounds, medians: cuBLAS, whole tiles (sk_tiles=0, the plan before), the rule's plan now (gemm(variant="hopper"))."""
import math, random, statistics
import torch
from fullpipe.kernels import gemm, hopper_gemm as hg, skinny_gemm
from fullpipe.kernels._operands import operand

sms = torch.cuda.get_device_properties(0).multi_processor_count
rng = random.Random(286)
shapes = []
drawn = 0
while len(shapes) < 28:
    m = rng.choice([rng.randint(33, 1100), rng.randint(1100, 6000)])
    n, k = rng.randrange(256, 12289, 8), rng.randrange(256, 12289, 8)
    fp16, wt = rng.random() < 0.25, rng.random() < 0.25
    drawn += 1
    if skinny_gemm.preferred(m, n, k, sms):
        continue
    b = hg.default_build(m, n, k, sms)
    clusters = hg.max_active_clusters(0, "sm_90a", b)
    tiles, slices = hg.cluster_tiles(m, n, b), -(-k // hg.BK)
    sk, _ = hg.stream_k(tiles, clusters, slices)
    if tiles // clusters == 1 and sk:
        shapes.append((m, n, k, fp16, wt, b, tiles, clusters))
print(f"{len(shapes)} of {drawn} random products change plan", flush=True)


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


print(f"{'M x N x K':>18} {'':9} {'build':>20} {'tiles':>9} {'cuBLAS us':>9} {'whole xcB':>9} {'sk xcB':>7} {'sk/whole':>8}",
      flush=True)
rows = []
for m, n, k, fp16, wt, b, tiles, clusters in shapes:
    dt = torch.float16 if fp16 else torch.bfloat16
    a = torch.randn(m, k, device="cuda", dtype=dt)
    w = torch.randn(n, k, device="cuda", dtype=dt).T if wt else torch.randn(k, n, device="cuda", dtype=dt)
    c = torch.empty(m, n, device="cuda", dtype=dt)
    ref = a.float() @ w.float()
    A, B = operand(a, "a"), operand(w, "b", transposed_ok=True)
    s = torch.cuda.current_stream
    fns = {"cuBLAS": lambda: torch.matmul(a, w, out=c),
           "whole": lambda: hg.run(A, B, "persistent", c, s(), build=b, sk_tiles=0),
           "sk": lambda: gemm(a, w, variant="hopper", stream=s(), out=c)}
    bad = False
    for nm in ("whole", "sk"):
        c.fill_(float("nan")); fns[nm](); torch.cuda.synchronize()
        err = ((c.float() - ref).norm() / ref.norm()).item()
        if not err < 1e-2:
            print("WRONG", nm, m, n, k, fp16, wt, err, flush=True); bad = True
    if bad:
        continue
    gs = {nm: graph(fn) for nm, fn in fns.items()}
    ts = {nm: [] for nm in gs}
    for r in range(7):
        for nm in (list(gs) if r % 2 else list(gs)[::-1]):
            ts[nm].append(time_us(gs[nm]))
    del gs
    med = {nm: statistics.median(v) for nm, v in ts.items()}
    rows.append((med["cuBLAS"] / med["whole"], med["cuBLAS"] / med["sk"], med["whole"] / med["sk"]))
    tag = ("f16" if fp16 else "bf16") + (" w.T" if wt else "")
    print(f"{f'{m}x{n}x{k}':>18} {tag:9} {b.label:>20} {f'{tiles}/{clusters}':>9} {med['cuBLAS']:>9.2f} {rows[-1][0]:>9.3f} "
          f"{rows[-1][1]:>7.3f} {rows[-1][2]:>8.3f}", flush=True)
gm = lambda v: math.exp(sum(map(math.log, v)) / len(v))
print(f"held-out {len(rows)}: x cuBLAS whole {gm([r[0] for r in rows]):.3f} -> stream-K {gm([r[1] for r in rows]):.3f}; "
      f"sk/whole {gm([r[2] for r in rows]):.3f}x (min {min(r[2] for r in rows):.3f}, max {max(r[2] for r in rows):.3f}); "
      f"slower by > 3 % on {sum(r[2] < 0.97 for r in rows)}", flush=True)
