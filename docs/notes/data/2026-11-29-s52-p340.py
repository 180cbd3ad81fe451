"""p340: small-N products (a classifier head, N ~1000) at 129-1024 rows: every candidate plan of gemm_tuning in
CUDA-graph replay (20 launches, 5 alternating rounds, medians) beside cuBLAS (torch.matmul), and the public
gemm() eager loop (host + device) as p333 timed it. Why did 200 x 1001 x 2048 (w.T) take 70 us where 2048 rows took 24?"""
import json, math, os, random, statistics, sys, time
import torch
from fullpipe.kernels import gemm, gemm_tuning as gt, hopper_gemm as hg
from fullpipe.kernels._operands import operand

sms = torch.cuda.get_device_properties(0).multi_processor_count


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


def eager_us(fn, n=50):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        fn()
    b.record(); torch.cuda.synchronize()
    return a.elapsed_time(b) * 1e3 / n


fixed = [(200, 1001, 2048, True), (200, 1008, 2048, True), (200, 1008, 2048, False), (2048, 1001, 2048, True),
         (129, 1001, 4096, True), (256, 1000, 2048, True), (512, 1001, 2048, True), (1024, 1001, 1024, True),
         (200, 2000, 2048, True), (200, 1001, 512, True)]
rng = random.Random(340)
for _ in range(int(os.environ.get("P340_N", 12))):
    fixed.append((rng.randint(129, 1024), rng.randrange(256, 3072), rng.randrange(512, 8193, 8), True))
results = []
for m, n, k, wt in fixed:
    dt = torch.bfloat16
    a = torch.randn(m, k, device="cuda", dtype=dt)
    w = torch.randn(n, k, device="cuda", dtype=dt)
    b = w.T if wt else torch.randn(k, n, device="cuda", dtype=dt)
    pitch = -(-n // 8) * 8
    cp = torch.empty(m, pitch, device="cuda", dtype=dt)
    c = cp[:, :n]
    ref = a.float() @ b.float()
    A, B = operand(a, "a"), operand(b, "b", transposed_ok=True)
    cur = torch.cuda.current_stream
    plans = gt.candidates(m, n, k, sms, wt)
    fns = {"cuBLAS": lambda: torch.matmul(a, b)}
    for p in plans:
        fns[p.label] = (lambda p=p: gt.run_plan(p, A, B, c, cur()))
    for nm in [x for x in fns if x != "cuBLAS"]:
        c.fill_(float("nan")); fns[nm](); torch.cuda.synchronize()
        err = ((c.float() - ref).norm() / ref.norm()).item()
        if not err < 1e-2:
            print("WRONG", nm, m, n, k, wt, err, flush=True)
            del fns[nm]
    gs = {nm: graph(fn) for nm, fn in fns.items()}
    ts = {nm: [] for nm in gs}
    for r in range(5):
        for nm in (list(gs) if r % 2 else list(gs)[::-1]):
            ts[nm].append(time_us(gs[nm]))
    del gs
    med = {nm: statistics.median(v) for nm, v in ts.items()}
    s = torch.cuda.current_stream()
    eg = {"torch eager": eager_us(lambda: torch.matmul(a, b)),
          "gemm eager": eager_us(lambda: gemm(a, b, variant="hopper", stream=s)),
          "gemm eager out=": eager_us(lambda: gemm(a, b, variant="hopper", stream=s, out=c))}
    rule = plans[0].label
    best = min((x for x in med if x != "cuBLAS"), key=med.get)
    results.append(dict(m=m, n=n, k=k, wt=wt, rule=rule, us=med, eager=eg))
    print(f"{f'{m}x{n}x{k}':>15} {'w.T' if wt else 'B  '} cuBLAS {med['cuBLAS']:6.1f} us  rule {rule:24s} {med[rule]:6.1f} "
          f"({med['cuBLAS'] / med[rule]:.2f}x)  best {best:28s} {med[best]:6.1f} ({med['cuBLAS'] / med[best]:.2f}x)  "
          f"eager torch {eg['torch eager']:6.1f} gemm {eg['gemm eager']:6.1f} out= {eg['gemm eager out=']:6.1f}", flush=True)
    for nm in sorted(med, key=med.get):
        print(f"      {nm:32s} {med[nm]:7.1f} us", flush=True)
json.dump(results, open(os.path.join(os.environ.get("OUT", "."), "p340.json"), "w"), indent=1)
gm = lambda v: math.exp(sum(map(math.log, v)) / len(v))
print("RESULT geomean x cuBLAS: rule", f"{gm([r['us']['cuBLAS'] / r['us'][r['rule']] for r in results]):.3f}",
      "best", f"{gm([r['us']['cuBLAS'] / min(v for k_, v in r['us'].items() if k_ != 'cuBLAS') for r in results]):.3f}")
