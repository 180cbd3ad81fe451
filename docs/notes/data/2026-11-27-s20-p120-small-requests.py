"""p120 (session 20): a run's fixed cost, by phase. (a) small requests: pipe.run(x) of 256 KiB
and 4 MiB (pinned and pageable) against the naive torch call (x.cuda() -> f -> .cpu()) per call;
(b) run_batches(12 pinned 8 MiB, outs=) with its phases timed by wrapping the executor's methods."""
import time, statistics, collections, functools
import numpy as np, torch, fullpipe as fp
import fullpipe.pipeline.executor as E
f = lambda x: x * 2
pool = fp.DevicePool(0, release_threshold="max")
def bench(fn, n=300):
    for _ in range(20): fn()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e6
print("(a) one request per call, us (median of 300)")
for kb in (256, 4096):
    for pinned in (False, True):
        t = torch.randn(kb * 256 // 1024, 1024)
        if pinned: t = t.pin_memory()
        pipe = fp.StreamPipeline(f, pool=pool, chunk="auto")
        pipe1 = fp.StreamPipeline(f, pool=pool, streams=1, chunk=1 << 30)
        naive = bench(lambda: f(t.cuda(non_blocking=True)).cpu())
        a = bench(lambda: pipe.run(t))
        b = bench(lambda: pipe1.run(t))
        print(f"  {kb:5d} KiB {'pinned' if pinned else 'pageable':8s}: naive {naive:7.1f}  fullpipe defaults {a:7.1f} ({naive / a:.2f}x)"
              f"  streams=1, one chunk {b:7.1f} ({naive / b:.2f}x); stats: {pipe.stats.batches} batches, chunk {pipe.stats.chunk.get('rows')} rows")
# (b) phases
acc = collections.defaultdict(list)
def timed(name, fn):
    @functools.wraps(fn)
    def w(*a, **k):
        t0 = time.perf_counter()
        try: return fn(*a, **k)
        finally: acc[name].append((time.perf_counter() - t0) * 1e6)
    return w
for name in ("_run_batches", "_execute", "_open_run", "_eager_loop", "_finish_run", "_pinned_stats", "_tensor_compute",
             "_start", "_pins", "_bulk", "_stage_events"):
    setattr(E.StreamPipeline, name, timed(name, getattr(E.StreamPipeline, name)))
for name in ("host_view", "_host_addresses"):
    setattr(E, name, timed(name, getattr(E, name)))
E.P.batches_from_list = timed("batches_from_list", E.P.batches_from_list)
E._Pins.pinned_list = timed("pinned_list", E._Pins.pinned_list)
E._Pins.settle = timed("settle", E._Pins.settle)
E._Outputs.__init__ = timed("_Outputs.__init__", E._Outputs.__init__)
E.busy_from_timings = timed("busy_from_timings", E.busy_from_timings)
E.LaneBuffers.take = timed("lanes.take", E.LaneBuffers.take)
E.TensorCompute.use_lanes = timed("tc.use_lanes", E.TensorCompute.use_lanes)
E.protocol_halves = timed("protocol_halves", E.protocol_halves)
xs = [torch.randn(2048, 1024).pin_memory() for _ in range(12)]
outs = [torch.empty_like(x).pin_memory() for x in xs]
pipe = fp.StreamPipeline(f, pool=pool)
for _ in range(20): pipe.run_batches(xs, outs=outs)
acc.clear()
wall = []
for _ in range(100):
    t0 = time.perf_counter(); pipe.run_batches(xs, outs=outs); wall.append((time.perf_counter() - t0) * 1e6)
print(f"\n(b) run_batches(12 x 8 MiB pinned, outs=): {statistics.median(wall):.0f} us per run; phases (median us per call, calls per run):")
for k, v in sorted(acc.items(), key=lambda kv: -statistics.median(kv[1]) * len(kv[1])):
    print(f"  {k:22s} {statistics.median(v):8.1f} x {len(v) / 100:5.1f}")
