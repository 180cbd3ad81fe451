"""p385 (from p383): held out for the 64-row-block branch: random products where default_build takes the transposed product in 64-row blocks (rows on the sectors, N <= 4224); p383 (from p382): held-out products for the transposed product's rule: default_build (new) against unswapped_build (old); p382: random products x @ w.T of 65-256 rows (seed argv[1], count argv[2]): the rule's build, the transposed product
(swap_ab) in 128-row blocks in clusters of 2 (one block for SWAP_WIDTHS_ONE_BLOCK) and one block a cluster, in 64-row
blocks, and cuBLAS. M 65-256, N 1024-32768 (multiples of 8 and some odd), K 768-16384 (multiples of 8), 25 % fp16.
CUDA-graph replay of 20 launches, 5 alternating rounds, medians; errors against float32. Writes p382-<seed>.json."""
import json, math, os, random, statistics, sys, time
import torch
from fullpipe.kernels import hopper_gemm as hg
from fullpipe.kernels._operands import operand

sms = torch.cuda.get_device_properties(0).multi_processor_count
seed, count = int(sys.argv[1]), int(sys.argv[2])
rng = random.Random(seed)
shapes = []
while len(shapes) < count:
    m = rng.randint(65, 256)
    n = rng.randrange(512, 4225, 8) if rng.random() < 0.9 else rng.randint(512, 4224)
    k = rng.randrange(768, 16385, 16)
    b = hg.default_build(m, n, k, sms, True)
    if b.swap_ab and b.tile_m == 64:
        shapes.append((m, n, k, rng.random() < 0.25))


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
for m, n, k, fp16 in shapes:
    dt = torch.float16 if fp16 else torch.bfloat16
    a = torch.randn(m, k, device="cuda", dtype=dt)
    w = torch.randn(n, k, device="cuda", dtype=dt)
    b = w.T
    cbuf = torch.empty(m, -(-n // 8) * 8, device="cuda", dtype=dt)
    c = cbuf[:, :n]
    ref = a.float() @ b.float()
    A, B = operand(a, "a"), operand(b, "b", transposed_ok=True)
    cur = torch.cuda.current_stream
    builds = {"new": None, "old": hg.unswapped_build(m, n, k, sms, True), "swap128x2": hg.swap_build(m, 128, 2),
              "swap64": hg.swap_build(m, 64, 1)}
    fns = {"cuBLAS": lambda: torch.nn.functional.linear(a, w)}
    for nm, bd in builds.items():
        fns[nm] = (lambda bd=bd: hg.run(A, B, "persistent", c, cur(), build=bd))
    errs = {}
    for nm in [x for x in fns if x != "cuBLAS"]:
        c.fill_(float("nan")); fns[nm](); torch.cuda.synchronize()
        errs[nm] = err = ((c.float() - ref).norm() / ref.norm()).item()
        if not err < 1e-2:
            print("WRONG", nm, m, n, k, err, flush=True)
            del fns[nm]
    gs = {nm: graph(fn) for nm, fn in fns.items()}
    ts = {nm: [] for nm in gs}
    for r in range(5):
        for nm in (list(gs) if r % 2 else list(gs)[::-1]):
            ts[nm].append(time_us(gs[nm]))
    del gs
    med = {nm: statistics.median(v) for nm, v in ts.items()}
    rule = hg.default_build(m, n, k, sms, True)
    results.append(dict(m=m, n=n, k=k, fp16=fp16, rule=rule.label, us=med, err=errs))
    med["rule"] = med["new"]
    xs = "  ".join(f"{nm} {med['cuBLAS'] / med[nm]:.3f}" for nm in med if nm != "cuBLAS")
    print(f"{f'{m}x{n}x{k}':>18} {'f16' if fp16 else 'bf16':4s} cuBLAS {med['cuBLAS']:7.1f} us  x cuBLAS: {xs}  (rule {rule.label})",
          flush=True)
gm = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")
line = [f"{nm} {gm([r['us']['cuBLAS'] / r['us'][nm] for r in results if nm in r['us']]):.3f}"
        for nm in ("new", "old", "swap128x2", "swap64")]
best = [r["us"]["cuBLAS"] / min(v for nm, v in r["us"].items() if nm != "cuBLAS") for r in results]
print(f"SUMMARY seed {seed}: x cuBLAS gm " + ", ".join(line) + f", best of ours {gm(best):.3f}")
ch = [r for r in results if "swap" in r["rule"]]
sp = [r["us"]["old"] / r["us"]["new"] for r in ch]
print(f"new/old on the {len(ch)} of {len(results)} the rule swaps: gm {gm(sp):.3f}, min {min(sp, default=0):.3f}, max {max(sp, default=0):.3f}, "
      f"slower by >3 %: {sum(x < 1 / 1.03 for x in sp)}; over all {gm([r['us']['old'] / r['us']['new'] for r in results]):.3f}")
print(f"total {time.perf_counter() - t0:.1f} s")
json.dump(dict(sms=sms, gpu=torch.cuda.get_device_name(0), seed=seed, results=results),
          open(os.environ.get("OUT", ".") + f"/p385-{seed}.json", "w"), indent=1)
