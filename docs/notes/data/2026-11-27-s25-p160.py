"""fullpipe's rare slow runs on the encoder workload (p153/p159: 90-115 ms against 66-69): per run
the wall time, the host time split, pinned allocations, and the time Python's GC took."""
import gc, time, statistics
import numpy as np, torch
import fullpipe as fp
from fullpipe.experiments import workloads as W
dev = torch.device("cuda")
gen = torch.Generator().manual_seed(1)
w = W._variable_length(torch, dev, 1024 * 1024, gen, seed=14)
f, xs, ys = w.f, w.xs, w.ys
gc_s = [0.0]; gc_t0 = [0.0]; gc_n = [0]
def cb(phase, info):
    if phase == "start": gc_t0[0] = time.perf_counter()
    else: gc_s[0] += time.perf_counter() - gc_t0[0]; gc_n[0] += 1 if info["generation"] == 2 else 0
gc.callbacks.append(cb)
pipe = fp.StreamPipeline(f)
for r in range(25):
    gc_s[0] = 0.0; gc_n[0] = 0
    t0 = time.perf_counter(); pipe.run_batches(xs, outs=ys); ms = (time.perf_counter() - t0) * 1e3
    s = pipe.stats
    print(f"run {r:2d} {ms:6.1f} ms  gc {gc_s[0]*1e3:5.1f} ms ({gc_n[0]} gen2)  wait {s.host_wait_ms:5.1f} ms  host_us "
          + str({k: round(v) for k, v in s.host_us.items()}) + f"  pinned {s.pinned}  span {s.gpu_span_ms:.1f}")
