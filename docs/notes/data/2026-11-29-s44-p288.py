"""p288: measured plans (with whole tiles where the rule deals out) and the session-43 rule on held-out products. 40 new random products (seed 288; M 33-6000, N and K
256-12288, a quarter fp16, a quarter b = w.T) and 8 familiar ones: tune_gemm (timed), then CUDA-graph replay of 40
launches, 7 alternating rounds, medians: cuBLAS, the rule's plan, the measured plan (gemm(variant="hopper"))."""
import math, random, statistics, sys, time
import torch
from fullpipe.kernels import gemm, gemm_tuning as gt, tune_gemm
from fullpipe.kernels._operands import operand

sms = torch.cuda.get_device_properties(0).multi_processor_count
rng = random.Random(288)
shapes = []
while len(shapes) < 40:
    m = rng.choice([rng.randint(33, 1100), rng.randint(1100, 6000)])
    n, k = rng.randrange(256, 12289, 8), rng.randrange(256, 12289, 8)
    shapes.append((m, n, k, rng.random() < 0.25, rng.random() < 0.25))
shapes += [(4096, 4096, 4096, False, False), (8192, 8192, 8192, False, False), (8, 4096, 4096, False, True),
           (32, 11008, 4096, False, True), (2048, 4096, 4096, False, True), (512, 512, 4096, False, False),
           (1024, 1024, 1024, True, False), (128, 4096, 4096, False, True)]

t0 = time.perf_counter()
tuned = {}
for fp16 in (False, True):
    for wt in (False, True):
        group = [(m, n, k) for m, n, k, f, w in shapes if f == fp16 and w == wt]
        if not group:
            continue
        t = time.perf_counter()
        for r in tune_gemm(group, dtype="float16" if fp16 else "bfloat16", b_transposed=wt):
            tuned[(r.m, r.n, r.k, fp16, wt)] = r
        print(f"tuned {len(group)} {'f16' if fp16 else 'bf16'}{' w.T' if wt else ''} products in "
              f"{time.perf_counter() - t:.1f} s", flush=True)
print(f"tuning: {time.perf_counter() - t0:.1f} s for {len(shapes)} products (compiles included)", flush=True)
t = time.perf_counter()
tune_gemm([(777, 3000, 5000)])
print(f"one more product, kernels compiled: {time.perf_counter() - t:.2f} s", flush=True)


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


print(f"\n{'M x N x K':>18} {'':9} {'rule':>22} {'measured':>26} {'cuBLAS us':>9} {'rule xcB':>8} {'tuned xcB':>9} "
      f"{'tuned/rule':>10} {'at tuning':>9}", flush=True)
rows = []
for m, n, k, fp16, wt in shapes:
    dt = torch.float16 if fp16 else torch.bfloat16
    a = torch.randn(m, k, device="cuda", dtype=dt)
    b = torch.randn(n, k, device="cuda", dtype=dt).T if wt else torch.randn(k, n, device="cuda", dtype=dt)
    c = torch.empty(m, n, device="cuda", dtype=dt)
    ref = a.float() @ b.float()
    A, B = operand(a, "a"), operand(b, "b", transposed_ok=True)
    rule = gt.rule_plan(m, n, k, sms)
    fns = {"cuBLAS": lambda: torch.matmul(a, b, out=c),
           "rule": lambda: gt.run_plan(rule, A, B, c, torch.cuda.current_stream()),
           "tuned": lambda: gemm(a, b, variant="hopper", stream=torch.cuda.current_stream(), out=c)}
    bad = False
    for nm in ("rule", "tuned"):
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
    tr = tuned[(m, n, k, fp16, wt)]
    rows.append((med["cuBLAS"] / med["rule"], med["cuBLAS"] / med["tuned"], med["rule"] / med["tuned"], tr.speedup))
    tag = ("f16" if fp16 else "bf16") + (" w.T" if wt else "")
    print(f"{f'{m}x{n}x{k}':>18} {tag:9} {rule.label:>22} {tr.chosen:>26} {med['cuBLAS']:>9.2f} {rows[-1][0]:>8.3f} "
          f"{rows[-1][1]:>9.3f} {rows[-1][2]:>10.3f} {tr.speedup:>9.3f}", flush=True)
gm = lambda v: math.exp(sum(map(math.log, v)) / len(v))
held = rows[:40]
for name, rs in (("held-out 40", held), ("all", rows)):
    print(f"{name}: x cuBLAS rule {gm([r[0] for r in rs]):.3f} -> measured {gm([r[1] for r in rs]):.3f}; measured/rule "
          f"{gm([r[2] for r in rs]):.3f}x (min {min(r[2] for r in rs):.3f}, max {max(r[2] for r in rs):.3f}); slower "
          f"than the rule by > 3 % on {sum(r[2] < 0.97 for r in rs)} of {len(rs)}; changed {sum(r[3] > 1 for r in rs)}",
          flush=True)
import collections
print("chosen:", dict(collections.Counter(tuned[(m, n, k, f, w)].chosen for m, n, k, f, w in shapes).most_common()))
print("whole-tile plans chosen:", sum('+whole' in tuned[s].chosen for s in tuned))
