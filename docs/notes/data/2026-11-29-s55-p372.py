"""p372: the variable-length list by way on this host: compute alone (its launch loop's host time and the GPU's time),
the hand-written pipeline, fullpipe defaults / compute_threads=1 / compute_threads=3, in alternating rounds; each
fullpipe way's stats (path, host_us, loop us a batch, wall, GPU span and busy compute)."""
import statistics, time
import torch
import fullpipe as fp
from fullpipe.experiments import workloads as W

dev = torch.device("cuda")
gen = torch.Generator().manual_seed(1414)
w = W._variable_length(torch, dev, 256 * 1024, gen, seed=14)
xs, ys, f = w.xs, w.ys, w.f
n = len(xs)
stream = torch.cuda.Stream()
xs_dev = [x.to(dev) for x in xs]
e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
host_launch, gpu = [], []


def alone():
    torch.cuda.synchronize()
    t = time.perf_counter()
    with torch.cuda.stream(stream):
        e0.record(stream)
        for x in xs_dev:
            f(x)
        e1.record(stream)
    host_launch.append((time.perf_counter() - t) * 1e3)
    stream.synchronize()
    gpu.append(e0.elapsed_time(e1))


hand = W._HandPipeline(torch, dev, f, xs, ys)
pipes = {"defaults": fp.StreamPipeline(f), "threads=1": fp.StreamPipeline(f, compute_threads=1),
         "threads=3": fp.StreamPipeline(f, compute_threads=3)}
for p in pipes.values():
    for _ in range(20):
        p.run_batches(xs, outs=ys)
for _ in range(3):
    alone(); hand(xs, ys)
cont = [("alone", alone), ("hand", lambda: hand(xs, ys))] + [
    (k, (lambda p=p: p.run_batches(xs, outs=ys))) for k, p in pipes.items()]
ts = {k: [] for k, _ in cont}
sts = {k: [] for k in pipes}
for r in range(12):
    for k, fn in cont:
        for _ in range(3):
            torch.cuda.synchronize(); t = time.perf_counter(); fn(); torch.cuda.synchronize()
            ts[k].append((time.perf_counter() - t) * 1e3)
            if k in pipes:
                sts[k].append(pipes[k].stats)
m = {k: statistics.median(v) for k, v in ts.items()}
print(f"RESULT alone {m['alone']:.2f} ms ({m['alone'] * 1e3 / n:.0f} us/batch): its launch loop {statistics.median(host_launch):.2f} ms "
      f"host, GPU {statistics.median(gpu):.2f} ms; hand-written {m['hand']:.2f} ms ({m['alone'] / m['hand']:.3f}x)")
for k in pipes:
    st = sts[k][-1]
    med = lambda g: statistics.median(g(s) for s in sts[k])
    hu = {h: round(statistics.median((s.host_us or {}).get(h, 0) for s in sts[k])) for h in ("front", "compute_call", "back", "staging_wait")}
    paths = sorted({(s.list_path or {}).get("path") for s in sts[k]})
    print(f"RESULT {k:10s} {m[k]:.2f} ms = {m['alone'] / m[k]:.3f}x alone; wall {med(lambda s: s.wall_ms):.2f}; GPU span "
          f"{med(lambda s: s.gpu_span_ms or 0):.2f}, compute busy {med(lambda s: (s.busy_ms or {}).get('compute', 0)):.2f}; paths {paths}; "
          f"host_us {hu}; enqueue/batch {med(lambda s: s.enqueue_us_per_batch):.0f}; loop/batch {med(lambda s: s.loop_us_per_batch):.0f}; "
          f"staging {st.staging}; threads {st.compute_threads}", flush=True)
