"""Why is the encoder's call slower inside fullpipe than in compute alone? Alternating rounds,
one process, the bench's variable-length workload (127 batches): total ms and the host time of
the call (perf_counter around f, no sync) for
  alone1   : device-resident batches, one stream (the bench's bound)
  alone3   : the same, the call's stream rotating over 3 streams (torch.cuda.set_stream)
  views1   : one stream, each batch an as_strided view of one int32 block (as fullpipe cuts them)
  fp       : fullpipe run_batches, defaults (stats.host_us)
  fp_s1    : fullpipe streams=1
"""
import time, statistics, random
import numpy as np, torch
import fullpipe as fp
from fullpipe.experiments import workloads as W
dev = torch.device("cuda")
gen = torch.Generator().manual_seed(1)
w = W._variable_length(torch, dev, 1024 * 1024, gen, seed=14)
f, xs, ys = w.f, w.xs, w.ys
n = len(xs)
S = [torch.cuda.Stream() for _ in range(3)]
xs_dev = [t.to(dev) for t in xs]
block = torch.cat([t.reshape(-1) for t in xs_dev])
offs = np.cumsum([0] + [t.numel() for t in xs_dev])
views = [block.as_strided(t.shape, t.stride(), int(o)) for t, o in zip(xs_dev, offs)]
def alone(streams, inputs):
    call = []
    t0 = time.perf_counter()
    for i, x in enumerate(inputs):
        torch.cuda.set_stream(streams[i % len(streams)])
        c0 = time.perf_counter(); f(x); call.append(time.perf_counter() - c0)
    torch.cuda.synchronize()
    torch.cuda.set_stream(torch.cuda.default_stream())
    return (time.perf_counter() - t0) * 1e3, statistics.mean(call) * 1e6
pipes = {"fp": fp.StreamPipeline(f), "fp_s1": fp.StreamPipeline(f, streams=1)}
def fpr(name):
    p = pipes[name]
    t0 = time.perf_counter(); p.run_batches(xs, outs=ys); ms = (time.perf_counter() - t0) * 1e3
    return ms, p.stats.host_us.get("compute_call", 0.0)
cases = {"alone1": lambda: alone(S[:1], xs_dev), "alone3": lambda: alone(S, xs_dev),
         "views1": lambda: alone(S[:1], views), "fp": lambda: fpr("fp"), "fp_s1": lambda: fpr("fp_s1")}
res = {k: [] for k in cases}
for k in cases: cases[k]()  # warm-up
for r in range(6):
    order = list(cases); random.Random(r).shuffle(order)
    for k in order:
        res[k].append(cases[k]())
print(f"{n} batches; per case: median total ms, median host us per call (6 rounds)")
for k, v in res.items():
    print(f"  {k:7s} {statistics.median(a for a, _ in v):7.1f} ms  call {statistics.median(b for _, b in v):6.0f} us   all: " + " ".join(f"{a:.0f}" for a, _ in v))
