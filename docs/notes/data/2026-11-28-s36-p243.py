"""p243 (session 36): does per-batch stage timing cost the balanced pipeline throughput?

The overlap bench measures its eager rows with timing=True (four timing events per
batch); its graph rows have none and read 0.97-1.00x the bound where the eager 3-stream
row read 0.91-0.95x (sessions 34-36). The same balanced batches (96 x 8 MiB pinned,
compute calibrated to the copy time), 3 streams, in alternating rounds: timing True,
"sampled" (the default), False, and graph=True. Ratio = bound / wall, bound measured here.
"""
import statistics
import time

import numpy as np

from fullpipe.cuda import driver as drv
from fullpipe.cuda.device import Device
from fullpipe.cuda.memory import pinned_empty
from fullpipe.cuda.pool import DevicePool
from fullpipe.cuda.streams import create_stream
from fullpipe.cuda.timing import median, time_on_stream, time_streams
from fullpipe.experiments.measure import in_turn
from fullpipe.experiments.overlap import CHUNK_BYTES, _all_copies, _check_correct
from fullpipe.pipeline import StreamPipeline
from fullpipe.pipeline.workload import MixKernel, calibrate_rounds

dev = Device(0)
dev.set_current()
B, n = 96, CHUNK_BYTES // 4
rng = np.random.default_rng(7)
x = pinned_empty(B * n, np.uint32)
y = pinned_empty(B * n, np.uint32)
x[:] = rng.integers(0, 2**32, x.size, dtype=np.uint32)
pool = DevicePool(dev, release_threshold="max")
s0, s1 = create_stream(dev), create_stream(dev)
da, db = pool.empty(n, np.uint32, s0), pool.empty(n, np.uint32, s0)
with drv.translated("cuStreamSynchronize"):
    s0.sync()
h2d, d2h = _all_copies(x, y, n, da, db, s0, s1)
both_ms = median(time_streams(dev, s0, [(s0, h2d), (s1, d2h)], repeat=5))
kernel = MixKernel(dev)
rounds, _ = calibrate_rounds(kernel, s0, da, db, both_ms / B)
compute_ms = median(time_on_stream(lambda: [kernel(s0, da, db) for _ in range(B)], s0, warmup=1, repeat=3))
bound = max(both_ms, compute_ms)
print(f"copies both ways {both_ms:.2f} ms, compute {compute_ms:.2f} ms ({rounds} rounds); bound {bound:.2f} ms", flush=True)

ways = {"timing=True": dict(timing=True), "sampled (default)": {}, "timing=False": dict(timing=False),
        "graph=True": dict(graph=True), "copy_streams, timing=False": dict(copy_streams=True, timing=False)}
pipes = {k: StreamPipeline(kernel, streams=3, chunk=n, pool=pool, device=dev, **kw) for k, kw in ways.items()}
ok = all(_check_correct(p, x, y, rounds, rng) for p in pipes.values())
for p in pipes.values():
    for _ in range(3):
        p.run(x, out=y)
walls = {k: [] for k in ways}
enq = {k: [] for k in ways}
for r in range(10):
    for k in in_turn(list(ways), r):
        t0 = time.perf_counter()
        pipes[k].run(x, out=y)
        walls[k].append((time.perf_counter() - t0) * 1e3)
        enq[k].append(pipes[k].stats.enqueue_us_per_batch)
ok &= all(_check_correct(p, x, y, rounds, rng) for p in pipes.values())
print(f"correct: {ok}")
for k in ways:
    w = statistics.median(walls[k])
    print(f"{k:28s} wall {w:7.2f} ms  {bound / w:.3f}x bound  (best {bound / min(walls[k]):.3f}x)  "
          f"enqueue {statistics.median(enq[k]):.1f} us/batch", flush=True)
for p in pipes.values():
    p.close()
