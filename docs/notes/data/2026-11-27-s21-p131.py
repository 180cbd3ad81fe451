"""p131 (session 21): where a plain run's time goes (256 KiB and 1 MiB pageable torch, x*2): run() phases by
wrapping the executor's functions and run_plain's steps, medians of 300 calls, us; the naive call beside."""
import time, statistics, collections, functools
import torch, fullpipe as fp
import fullpipe.pipeline.executor as E, fullpipe.pipeline.plain as PL, fullpipe.pipeline.tensors as T
acc = collections.defaultdict(list)
def timed(name, fn):
    @functools.wraps(fn)
    def w(*a, **k):
        t0 = time.perf_counter()
        try: return fn(*a, **k)
        finally: acc[name].append((time.perf_counter() - t0) * 1e6)
    return w
for name in ("run", "_run_array", "_tune", "_tensor_compute", "_pinned_stats", "_start", "_pins", "_runs_plain"):
    setattr(E.StreamPipeline, name, timed(name, getattr(E.StreamPipeline, name)))
for name in ("host_view", "run_plain"):
    setattr(E, name, timed(name, getattr(E, name)))
E._Pins.pinned = timed("pins.pinned", E._Pins.pinned)
E._Pins.annotate = timed("pins.annotate", E._Pins.annotate)
E._Outputs.__init__ = timed("_Outputs.__init__", E._Outputs.__init__)
E._Outputs.place = timed("_Outputs.place", E._Outputs.place)
T.TorchFramework.output = timed("fw.output", T.TorchFramework.output)
T.TorchFramework.host_dtype = timed("fw.host_dtype", T.TorchFramework.host_dtype)
T.TorchFramework.set_current = timed("fw.set_current", T.TorchFramework.set_current)
T.TorchFramework.current_stream = timed("fw.current_stream", T.TorchFramework.current_stream)
E.P.batches_from_array = timed("batches_from_array", E.P.batches_from_array)
pool = fp.DevicePool(0, release_threshold="max")
f = lambda x: x * 2
for kb in (256, 1024):
    t = torch.randn(kb * 256 // 1024, 1024)
    pipe = fp.StreamPipeline(f, pool=pool)
    s = torch.cuda.Stream()
    def naive_side():
        with torch.cuda.stream(s):
            y = f(t.cuda(non_blocking=True)).cpu()
        return y
    ts = {"naive": [], "naive on a side stream": []}
    for _ in range(300):
        t0 = time.perf_counter(); f(t.cuda(non_blocking=True)).cpu(); ts["naive"].append((time.perf_counter() - t0) * 1e6)
        t0 = time.perf_counter(); naive_side(); ts["naive on a side stream"].append((time.perf_counter() - t0) * 1e6)
    for _ in range(20): pipe.run(t)
    acc.clear()
    for _ in range(300): pipe.run(t)
    print(f"== {kb} KiB pageable: " + ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in ts.items()))
    for k, v in sorted(acc.items(), key=lambda kv: -statistics.median(kv[1])):
        print(f"  {k:22s} {statistics.median(v):8.1f} us x {len(v) / 300:.0f}")
