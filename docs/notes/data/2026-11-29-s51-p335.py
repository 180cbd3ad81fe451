"""p335: held-out test of a rule proposed from p334's two products (200 x 6144 x 4096 1.19x, 200 x 4608 x 3584 1.07x):
where default_build gives 128 x 128 tiles one block a cluster (NARROW) to one row of 2 x 1 clusters (129-256 rows),
the same tiles in clusters of 2 sharing B (PAIR: multicast, B read once for both tile rows), each with stream_k's
choice. 40 random products (seed 335), M 129-256, N 2048-16384, K 1024-16384, on which the rule gives NARROW.
Per product: NARROW, PAIR (rule's stream-K, every tile dealt out, whole tiles), cuBLAS. CUDA-graph replay of 20
launches, 5 alternating rounds, medians. Writes p335.json."""
import dataclasses, json, math, os, random, statistics, time
import torch
from fullpipe.kernels import hopper_gemm as hg
from fullpipe.kernels._operands import operand

sms = torch.cuda.get_device_properties(0).multi_processor_count
PAIR = dataclasses.replace(hg.PERSISTENT, tile_n=128, stages=6)
rng = random.Random(int(os.environ.get("P335_SEED", 335)))
shapes = []
while len(shapes) < int(os.environ.get("P335_N", 40)):
    m, n, k = rng.randint(129, 256), rng.randrange(2048, 16385, 8), rng.randrange(1024, 16385, 8)
    wt, fp16 = rng.random() < 0.7, rng.random() < 0.25
    b = hg.default_build(m, n, k, sms, wt)
    if dataclasses.replace(b, b_k_major=False) != hg.PERSISTENT_NARROW:
        continue
    shapes.append((m, n, k, fp16, wt))


def graph(fn, n=20):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    g.replay(); torch.cuda.synchronize()
    return g


def time_us(g, n=20):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); g.replay(); b.record(); b.synchronize()
    return a.elapsed_time(b) / n * 1e3


results = []
t0 = time.perf_counter()
for m, n, k, fp16, wt in shapes:
    dt = torch.float16 if fp16 else torch.bfloat16
    a = torch.randn(m, k, device="cuda", dtype=dt)
    b = torch.randn(n, k, device="cuda", dtype=dt).T if wt else torch.randn(k, n, device="cuda", dtype=dt)
    c = torch.empty(m, n, device="cuda", dtype=dt)
    ref = a.float() @ b.float()
    A, B = operand(a, "a"), operand(b, "b", transposed_ok=True)
    cur = torch.cuda.current_stream
    pair_tiles = hg.cluster_tiles(m, n, PAIR)
    fns = {"cuBLAS": lambda: torch.matmul(a, b, out=c),
           "narrow": lambda: hg.run(A, B, "persistent", c, cur(), build=hg.PERSISTENT_NARROW),
           "pair": lambda: hg.run(A, B, "persistent", c, cur(), build=PAIR),
           "pair+sk-all": lambda: hg.run(A, B, "persistent", c, cur(), build=PAIR, sk_tiles=pair_tiles),
           "pair+whole": lambda: hg.run(A, B, "persistent", c, cur(), build=PAIR, sk_tiles=0)}
    for nm in [x for x in fns if x != "cuBLAS"]:
        c.fill_(float("nan")); fns[nm](); torch.cuda.synchronize()
        err = ((c.float() - ref).norm() / ref.norm()).item()
        if not err < 1e-2:
            print("WRONG", nm, m, n, k, fp16, wt, err, flush=True)
            del fns[nm]
    gs = {nm: graph(fn) for nm, fn in fns.items()}
    ts = {nm: [] for nm in gs}
    for r in range(5):
        for nm in (list(gs) if r % 2 else list(gs)[::-1]):
            ts[nm].append(time_us(gs[nm]))
    del gs
    med = {nm: statistics.median(v) for nm, v in ts.items()}
    tag = ("f16" if fp16 else "bf16") + (" w.T" if wt else "")
    slices = -(-k // 64)
    results.append(dict(m=m, n=n, k=k, dtype=tag, slices=slices, pair_tiles=pair_tiles, us=med))
    print(f"{f'{m}x{n}x{k}':>17} {tag:9} slices {slices:4d} pair tiles {pair_tiles:3d}  narrow {med['cuBLAS'] / med['narrow']:.3f}xcB  "
          f"pair {med['cuBLAS'] / med['pair']:.3f}  sk-all {med['cuBLAS'] / med['pair+sk-all']:.3f}  whole "
          f"{med['cuBLAS'] / med['pair+whole']:.3f}  pair/narrow {med['narrow'] / med['pair']:.3f}", flush=True)
gm = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")
for nm in ("narrow", "pair", "pair+sk-all", "pair+whole"):
    print(f"{nm:12s} x cuBLAS gm {gm([r['us']['cuBLAS'] / r['us'][nm] for r in results]):.3f}")
sp = [r['us']['narrow'] / r['us']['pair'] for r in results]
print(f"pair/narrow gm {gm(sp):.3f} min {min(sp):.3f} max {max(sp):.3f}; slower >3% {sum(x < 1 / 1.03 for x in sp)} of {len(sp)}")
print(f"total {time.perf_counter() - t0:.1f} s")
json.dump(dict(sms=sms, gpu=torch.cuda.get_device_name(0), results=results), open(os.environ.get("OUT", ".") + "/p335.json", "w"), indent=1)
