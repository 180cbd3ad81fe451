"""p366: the bench's variable-length list (--quick's, defaults, outs=) run N times in timed_loop(), for py-spy."""
import sys, time, statistics
import torch
import fullpipe as fp
from fullpipe.experiments import workloads as W

n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
dev = torch.device("cuda")
gen = torch.Generator().manual_seed(1414)
w = W._variable_length(torch, dev, 256 * 1024, gen, seed=14)
p = fp.StreamPipeline(w.f)
for _ in range(20):
    p.run_batches(w.xs, outs=w.ys)
stream = torch.cuda.Stream()
alone = W._compute_alone(torch, dev, w.f, w.xs, stream)


def timed_loop():
    ts, tw = [], []
    for _ in range(n):
        t = time.perf_counter(); p.run_batches(w.xs, outs=w.ys); ts.append((time.perf_counter() - t) * 1e3)
        tw.append(p.stats.wall_ms)
    return ts, tw


ta = []
for _ in range(10):
    t = time.perf_counter(); alone(); ta.append((time.perf_counter() - t) * 1e3)
ts, tw = timed_loop()
for _ in range(10):
    t = time.perf_counter(); alone(); ta.append((time.perf_counter() - t) * 1e3)
print(f"RESULT path {(p.stats.list_path or {}).get('path')}: run {statistics.median(ts):.2f} ms (stats.wall "
      f"{statistics.median(tw):.2f}), compute alone {statistics.median(ta):.2f} ms: "
      f"{statistics.median(ta) / statistics.median(ts):.3f}x", flush=True)
