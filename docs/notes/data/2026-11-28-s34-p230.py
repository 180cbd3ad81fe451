"""Session 34: where a single small request's host time goes: run(x), run_batches([x]) and
the naive call, 64 KiB through x * 2 (argv[1]: which loop to run for py-spy, or 'time')."""
import statistics, sys, time
import torch
import fullpipe as fp

f = lambda t: t * 2
x = torch.randn(32, 512)  # 64 KiB
pipe = fp.StreamPipeline(f)
for _ in range(50):
    pipe.run_batches([x]); pipe.run(x); f(x.cuda()).cpu()
ops = {"naive": lambda: f(x.cuda()).cpu(), "run(x)": lambda: pipe.run(x),
       "run_batches([x])": lambda: pipe.run_batches([x])}
if sys.argv[1] != "time":
    op = ops[sys.argv[1]]
    t_end = time.perf_counter() + 6
    while time.perf_counter() < t_end:
        for _ in range(100):
            op()
    sys.exit(0)
res = {k: [] for k in ops}
for rd in range(9):
    for k, op in ops.items():
        t0 = time.perf_counter()
        for _ in range(300):
            op()
        res[k].append((time.perf_counter() - t0) / 300 * 1e6)
med = {k: statistics.median(v) for k, v in res.items()}
print(" ".join(f"{k} {v:.1f} us" for k, v in med.items()),
      f"| run_batches([x]) {med['run_batches([x])'] / med['naive']:.2f}x naive, run(x) {med['run(x)'] / med['naive']:.2f}x")
print("stats:", pipe.stats.staging, pipe.stats.host_us)
