"""Is the encoder's call slower inside fullpipe because fullpipe's copy threads want the GIL?
Alternating rounds in one process (the bench's variable-length workload, 127 batches):
fullpipe over pageable batches (bulk staging: inputs copied in groups and outputs drained by
threads during the run) against the same batches pinned (no host copies), and compute alone."""
import time, statistics, random, sys
import numpy as np, torch
import fullpipe as fp
from fullpipe.experiments import workloads as W
dev = torch.device("cuda")
gen = torch.Generator().manual_seed(1)
w = W._variable_length(torch, dev, 1024 * 1024, gen, seed=14)
f, xs, ys = w.f, w.xs, w.ys
xs_p = [t.pin_memory() for t in xs]
ys_p = [t.pin_memory() for t in ys]
S = [torch.cuda.Stream() for _ in range(3)]
xs_dev = [t.to(dev) for t in xs]
def alone(streams):
    call = []
    t0 = time.perf_counter()
    for i, x in enumerate(xs_dev):
        torch.cuda.set_stream(streams[i % len(streams)])
        c0 = time.perf_counter(); f(x); call.append(time.perf_counter() - c0)
    torch.cuda.synchronize()
    torch.cuda.set_stream(torch.cuda.default_stream())
    return (time.perf_counter() - t0) * 1e3, statistics.mean(call) * 1e6, ""
pipe = fp.StreamPipeline(f)
def fpr(inp, outs):
    t0 = time.perf_counter(); pipe.run_batches(inp, outs=outs); ms = (time.perf_counter() - t0) * 1e3
    s = pipe.stats
    return ms, s.host_us.get("compute_call", 0.0), f"{s.staging['input']}/{s.staging['output']} wait {s.host_wait_ms:.1f}"
cases = {"alone1": lambda: alone(S[:1]), "alone3": lambda: alone(S), "fp_pageable": lambda: fpr(xs, ys),
         "fp_pinned": lambda: fpr(xs_p, ys_p)}
res = {k: [] for k in cases}
for k in cases: cases[k](); cases[k]()
for r in range(8):
    order = list(cases); random.Random(r).shuffle(order)
    for k in order:
        res[k].append(cases[k]())
print(f"{len(xs)} batches; median total ms, median host us per call (8 rounds), switch interval {sys.getswitchinterval()}")
for k, v in res.items():
    print(f"  {k:12s} {statistics.median(a for a, _, _ in v):7.1f} ms  call {statistics.median(b for _, b, _ in v):6.0f} us  {v[-1][2]}  all: "
          + " ".join(f"{a:.0f}" for a, _, _ in v))
