"""p370: the bench's variable-length list (--quick's, defaults, outs=): N runs against compute alone in alternating
rounds; the run's time outside stats.wall; Python's garbage collections during the runs."""
import gc, statistics, sys, time
import torch
import fullpipe as fp
from fullpipe.experiments import workloads as W

n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
tag = sys.argv[2] if len(sys.argv) > 2 else ""
dev = torch.device("cuda")
gen = torch.Generator().manual_seed(1414)
w = W._variable_length(torch, dev, 256 * 1024, gen, seed=14)
p = fp.StreamPipeline(w.f)
for _ in range(20):
    p.run_batches(w.xs, outs=w.ys)
ref = [y.clone() for y in w.ys]
stream = torch.cuda.Stream()
alone = W._compute_alone(torch, dev, w.f, w.xs, stream)
gcs = {"n": [0, 0, 0], "s": 0.0}
t_gc = [0.0]


def cb(phase, info):
    if phase == "start":
        t_gc[0] = time.perf_counter()
    else:
        gcs["n"][info["generation"]] += 1
        gcs["s"] += time.perf_counter() - t_gc[0]


ts, tw, ta, td = [], [], [], []
for r in range(10):
    for _ in range(3):
        t = time.perf_counter(); alone(); ta.append((time.perf_counter() - t) * 1e3)
    gc.callbacks.append(cb)
    for _ in range(n // 10):
        t = time.perf_counter(); p.run_batches(w.xs, outs=w.ys); ts.append((time.perf_counter() - t) * 1e3)
        tw.append(p.stats.wall_ms); td.append(p.stats.bulk_drain_ms)
    gc.callbacks.remove(cb)
ok = all(torch.allclose(a, b, rtol=2e-2, atol=2e-2) for a, b in zip(ref, w.ys))
mr, mw, ma = statistics.median(ts), statistics.median(tw), statistics.median(ta)
print(f"RESULT {tag:4s} path {(p.stats.list_path or {}).get('path')}: run {mr:.2f} ms (stats.wall {mw:.2f}, outside "
      f"{mr - mw:.2f}, drain after the GPU {statistics.median(td):.2f}), compute alone {ma:.2f} ms: {ma / mr:.3f}x; gc per run {[round(c / n, 2) for c in gcs['n']]}, "
      f"{gcs['s'] * 1e6 / n:.0f} us; outputs as before: {ok}", flush=True)
