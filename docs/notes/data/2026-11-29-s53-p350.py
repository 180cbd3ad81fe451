"""p350: the variable-length list at --quick's size: where the caller's thread spends each run outside the
compute calls, by phase (inclusive wrappers, caller's thread only), on the way the list runs (threads/pipelined)."""
import collections, functools, inspect, statistics, sys, threading, time
import torch
import fullpipe as fp
from fullpipe.experiments import workloads as W
from fullpipe.pipeline import executor as E, plan as P, tensors as T, list_paths as LP, pageable as PG, bulk as B

dev = torch.device("cuda")
gen = torch.Generator().manual_seed(1414)
w = W._variable_length(torch, dev, 256 * 1024, gen, seed=14)
xs, ys, f = w.xs, w.ys, w.f
print(f"{len(xs)} batches", flush=True)
main = threading.get_ident()
acc, cnt, on = collections.defaultdict(float), collections.defaultdict(int), [False]


def wrap(owner, name, label=None):
    static = inspect.getattr_static(owner, name)
    orig = getattr(owner, name)
    label = label or f"{getattr(owner, '__name__', '?')}.{name}"

    @functools.wraps(orig)
    def w(*a, **k):
        if not on[0] or threading.get_ident() != main:
            return orig(*a, **k)
        t = time.perf_counter()
        try:
            return orig(*a, **k)
        finally:
            acc[label] += time.perf_counter() - t
            cnt[label] += 1
    setattr(owner, name, staticmethod(w) if isinstance(static, staticmethod) else w)


SP = E.StreamPipeline
for n in ["_run_list", "_run_small_list", "_long_list_for_threads", "_run_long_list", "_run_list_pipelined",
          "_inputs_pinned", "_tensor_compute", "_execute", "_bulk", "_open_run", "_eager_loop", "_finish_run",
          "_drain_while_finishing", "_pinned_stats", "_say_serial", "_start", "_pins", "_threaded_loop",
          "_warn_few_batches"]:
    if hasattr(SP, n):
        wrap(SP, n)
for n in ["host_view", "_host_addresses", "_check_outputs_apart", "like_input", "free_collected", "ensure_current",
          "busy_from_timings", "_scaled_busy"]:
    if hasattr(E, n):
        wrap(E, n)
wrap(P, "batches_from_list")
wrap(E._OutsRead, "of")
for n in ["pinned_list", "settle", "annotate", "release"]:
    wrap(E._Pins, n)
wrap(E._Outputs, "__init__", "_Outputs.__init__")
wrap(E._Outputs, "begin_execute")
wrap(E.PipelineStats, "__init__", "PipelineStats.__init__")
for n in ["begin_run", "release", "learn_compute_time"]:
    wrap(T.TensorCompute, n)
for n in ["next_path", "record", "describe", "in_trial"]:
    wrap(LP.ListPaths, n)
wrap(LP, "list_key")
wrap(E, "list_key")

p = fp.StreamPipeline(f)
for _ in range(14):
    p.run_batches(xs, outs=ys)
print("list_path", p.stats.list_path, flush=True)


def timed(nruns, label):
    acc.clear(); cnt.clear()
    outer = []
    on[0] = True
    for _ in range(nruns):
        torch.cuda.synchronize(); t = time.perf_counter(); p.run_batches(xs, outs=ys)
        outer.append((time.perf_counter() - t) * 1e3)
    on[0] = False
    st = p.stats
    print(f"== {label}: outer median {statistics.median(outer):.2f} ms, stats.wall {st.wall_ms:.2f}, path "
          f"{(st.list_path or {}).get('path')}, loop host/batch {st.loop_us_per_batch:.1f} us, host_us "
          f"{ {k: round(v) for k, v in st.host_us.items()} }", flush=True)
    for k, v in sorted(acc.items(), key=lambda kv: -kv[1]):
        print(f"   {k:40s} {v / nruns * 1e6:9.1f} us/run  {cnt[k] / nruns:6.1f} calls/run")


timed(30, "defaults")
p.retune()
p2 = fp.StreamPipeline(f, compute_threads=1)
for _ in range(10):
    p2.run_batches(xs, outs=ys)
p = p2
timed(30, "compute_threads=1")
