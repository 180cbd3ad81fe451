"""p268: the new default_build (64-row tiles) on held-out shapes: random products in no earlier probe (M 33-1100,
N 256-8192, K 256-12288; a quarter fp16, a quarter with b = w.T), where 128 x 256 tiles are not chosen. Against
session 38's rule (128 x 128 or 128 x 64) and the best of the four small builds, beside cuBLAS. CUDA-graph replay
of 40 launches, warm, 7 alternating rounds, medians; results checked first."""
import dataclasses, math, random, statistics
import torch
from fullpipe.kernels import hopper_gemm as hg

sms = torch.cuda.get_device_properties(0).multi_processor_count
BUILDS = {"m128n64": hg.PERSISTENT_SMALL, "m128n128": hg.PERSISTENT_NARROW, "m64n64": hg.PERSISTENT_M64_N64,
          "m64n128": hg.PERSISTENT_M64_N128}


def old_rule(m, n, k):
    nt = hg.cluster_tiles(m, n, hg.PERSISTENT_NARROW)
    sl = -(-k // 64)
    if 2 * nt > sms or (m > 128 and sl >= 128 and nt * sl >= 34 * sms):
        return hg.PERSISTENT_NARROW
    return hg.PERSISTENT_SMALL


rng = random.Random(268)
shapes = []
while len(shapes) < 44:
    m, n, k = rng.randint(33, 1100), rng.randrange(256, 8193, 8), rng.randrange(256, 12289, 8)
    if hg.default_build(m, n, k, sms).tile_n == 256:
        continue
    shapes.append((m, n, k, rng.random() < 0.25, rng.random() < 0.25))


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


print(f"{'M x N x K':>18} {'':6} {'new build':>20} {'old':>10} {'cuBLAS us':>9} {'new':>6} {'old':>6} {'best':>6} (x cuBLAS)  new/best old/best  "
      + " ".join(f"{b:>8}" for b in BUILDS) + " (x cuBLAS)")
bad, gains, vs_best, new_cb, old_cb, rows = 0, [], [], [], [], []
for m, n, k, fp16, wt in shapes:
    dt = torch.float16 if fp16 else torch.bfloat16
    a = torch.randn(m, k, device="cuda", dtype=dt)
    b = torch.randn(n, k, device="cuda", dtype=dt).T if wt else torch.randn(k, n, device="cuda", dtype=dt)
    c = torch.empty(m, n, device="cuda", dtype=dt)
    ref = a.float() @ b.float()
    old = old_rule(m, n, k)
    fns = {"cuBLAS": lambda: torch.matmul(a, b, out=c), "new": lambda: hg.gemm_hopper(a, b, out=c),
           "old": lambda: hg.gemm_hopper(a, b, out=c, _build=old)}
    for nm, bd in BUILDS.items():
        fns[nm] = (lambda bd: lambda: hg.gemm_hopper(a, b, out=c, _build=bd))(bd)
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
    best = min(med[x] for x in BUILDS)
    cb = med["cuBLAS"]
    tag = ("f16" if fp16 else "bf16") + (" w.T" if wt else "")
    print(f"{f'{m}x{n}x{k}':>18} {tag:6} {hg.default_build(m, n, k, sms).label:>20} {old.label[7:]:>10} {cb:>9.2f} "
          f"{cb / med['new']:>6.3f} {cb / med['old']:>6.3f} {cb / best:>6.3f}   {best / med['new']:>8.3f} {best / med['old']:>8.3f}  "
          + " ".join(f"{cb / med[b]:>8.3f}" for b in BUILDS),
          flush=True)
    gains.append(med["old"] / med["new"]); vs_best.append(best / med["new"])
    new_cb.append(cb / med["new"]); old_cb.append(cb / med["old"])
    rows.append({"m": m, "n": n, "k": k, "fp16": fp16, "wt": wt, "us": med})
    del graphs
import json, sys
json.dump(rows, open(sys.argv[1], "w"), indent=1)
g = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
print(f"geomean: new/old time {g(gains):.3f}x faster; new at {g(vs_best):.3f} of the best build (min {min(vs_best):.3f}); "
      f"x cuBLAS new {g(new_cb):.3f} old {g(old_cb):.3f}; new within 3% of best on {sum(v >= 0.97 for v in vs_best)} of {len(vs_best)}; "
      f"new slower than old by > 3% on {sum(x < 0.97 for x in gains)}")
print("wrong:", bad)
