"""Session 31, final code: run() of a dict of two 256 MiB float32 arrays, (x*w).sum(1), with
the defaults, against the naive loop (alternating rounds, medians); its fields are pinned in
place by the pin cache once seen again (staging says so)."""
import time, statistics
import torch
import fullpipe as fp
n = 1 << 22
X = {"x": torch.randn(n, 16), "w": torch.randn(n, 16)}
@torch.inference_mode()
def dot(b): return (b["x"] * b["w"]).sum(1, keepdim=True)
want = (X["x"] * X["w"]).sum(1, keepdim=True)
pd = fp.StreamPipeline(dot)
V = {"naive": lambda: dot({k: v.cuda() for k, v in X.items()}).cpu(), "records run": lambda: pd.run(X)}
res = {k: [] for k in V}
for fn in V.values(): fn()
for r in range(7):
    for k, fn in (list(V.items()) if r % 2 else list(V.items())[::-1]):
        torch.cuda.synchronize(); t0 = time.perf_counter(); y = fn(); res[k].append((time.perf_counter() - t0) * 1e3)
    print(f"  round {r}: staging {pd.stats.staging}", flush=True)
print("max err", float((pd.run(X) - want).abs().max()))
nv = statistics.median(res["naive"])
for k, v in res.items():
    m = statistics.median(v); print(f"  {k:14s} {m:7.1f} ms  {nv / m:5.2f}x naive  {[round(x) for x in v]}")
