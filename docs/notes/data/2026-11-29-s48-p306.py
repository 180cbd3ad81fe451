"""p306: the variable-length list at --quick's size through fullpipe's defaults: the caller's thread's time per run
outside the batches, precisely. (1) each per-batch pass of a run's set-up timed alone on the run's own lists
(micro-benchmarks, 200 repeats); (2) a few top-level functions wrapped (a few calls a run: little overhead), main
thread only; (3) garbage collections during the runs (gc.callbacks)."""
import collections, functools, gc, statistics, sys, threading, time
import torch
import fullpipe as fp
from fullpipe.experiments import workloads as W
from fullpipe.pipeline import executor as ex, plan as P, records, list_paths, bulk, tensors

dev = torch.device("cuda")
gen = torch.Generator().manual_seed(1414)
tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 256 * 1024
w = W._variable_length(torch, dev, tokens, gen, seed=14)
xs, ys, f = w.xs, w.ys, w.f
p = fp.StreamPipeline(f)
for _ in range(14):
    p.run_batches(xs, outs=ys)
print("list_path", p.stats.list_path, flush=True)


def nv():
    with ex.nvtx.range("x"):
        pass


def us(fn, n=200):
    fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


views = [ex.host_view(b, "b") for b in xs]
oviews = [ex.host_view(o, "o") for o in ys]
arrays, outs_np = [v[0] for v in views], [v[0] for v in oviews]
addrs = ex._host_addresses(xs, views)
oaddrs = ex._host_addresses(ys, oviews)
print("MICRO (us per run-sized pass over 29 batches):", flush=True)
for name, fn in [
    ("records.pack_all", lambda: records.pack_all(xs)),
    ("host_view x29", lambda: [ex.host_view(b, "b") for b in xs]),
    ("_host_addresses", lambda: ex._host_addresses(xs, views)),
    ("_check_outputs_apart", lambda: ex._check_outputs_apart(outs_np, arrays)),
    ("_check_outputs_apart, addresses", lambda: ex._check_outputs_apart(outs_np, arrays, oaddrs, addrs)),
    ("_OutsRead.of", lambda: ex._OutsRead.of(xs, views, ys)),
    ("list_key", lambda: list_paths.list_key(arrays, "torch")),
    ("batches_from_list", lambda: P.batches_from_list(arrays, None, P.OutputSpec(none=True), addrs)),
    ("_check_out_layout x29", lambda: [ex._check_out_layout(o, a.shape[0], "o") for o, a in zip(outs_np, arrays)]),
    ("_pinned x29 (driver)", lambda: [p._pinned(a, at) for a, at in zip(arrays, addrs)]),
    ("ctypes.data x29", lambda: [a.ctypes.data for a in arrays]),
    ("data_ptr x29", lambda: [t.data_ptr() for t in xs]),
    ("bulk.fits", lambda: bulk.fits([a.nbytes for a in arrays], 1 << 20)),
    ("bulk.offsets", lambda: bulk.offsets([a.nbytes for a in arrays])),
    ("free_collected", ex.free_collected),
    ("default_pin_cache().flush", lambda: ex.default_pin_cache().flush()),
    ("ensure_current", lambda: ex.ensure_current(p._dev_index)),
    ("nvtx.range", nv),
]:
    try:
        print(f"  {us(fn):8.1f}  {name}", flush=True)
    except Exception as e:  # noqa: BLE001
        print(f"  failed {name}: {type(e).__name__}: {e}", flush=True)

main = threading.main_thread()
acc = collections.defaultdict(lambda: [0, 0.0])
NAMES = {ex.StreamPipeline: ["run_batches", "_run_list", "_run_small_list", "_run_long_list", "_run_list_pipelined",
                             "_execute", "_bulk", "_inputs_pinned", "_open_run", "_finish_run",
                             "_drain_while_finishing", "_eager_loop", "_pinned_stats", "_tensor_compute", "_start", "_copier",
                             "_pins", "_say_serial", "_warn_few_batches", "_abort"],
         ex._Pins: ["pinned_list", "settle", "annotate", "release"],
         ex._Outputs: ["__init__", "begin_execute"],
         tensors.TensorCompute: ["begin_run", "release"],
         list_paths.ListPaths: ["record", "describe", "in_trial", "next_path"]}
for owner, names in NAMES.items():
    for name in names:
        fn = getattr(owner, name, None)
        if fn is None:
            print("no", owner.__name__, name); continue

        def inner(*a, __fn=fn, __label=f"{owner.__name__}.{name}", **k):
            if threading.current_thread() is not main:
                return __fn(*a, **k)
            t = time.perf_counter()
            try:
                return __fn(*a, **k)
            finally:
                e = acc[__label]; e[0] += 1; e[1] += time.perf_counter() - t
        setattr(owner, name, functools.wraps(fn)(inner))
for name in ("_check_outputs_apart", "_host_addresses", "host_view", "free_collected", "ensure_current",
             "_check_out_layout", "like_input"):
    fn = getattr(ex, name)

    def inner(*a, __fn=fn, __label=f"ex.{name}", **k):
        if threading.current_thread() is not main:
            return __fn(*a, **k)
        t = time.perf_counter()
        try:
            return __fn(*a, **k)
        finally:
            e = acc[__label]; e[0] += 1; e[1] += time.perf_counter() - t
    setattr(ex, name, inner)
orig_bfl = P.batches_from_list


def bfl(*a, **k):
    t = time.perf_counter()
    try:
        return orig_bfl(*a, **k)
    finally:
        e = acc["P.batches_from_list"]; e[0] += 1; e[1] += time.perf_counter() - t


P.batches_from_list = bfl
gcs = []
gstart = [0.0]


def gccb(phase, info):
    if phase == "start":
        gstart[0] = time.perf_counter()
    else:
        gcs.append((info["generation"], time.perf_counter() - gstart[0]))


gc.callbacks.append(gccb)
N = 60
walls, inner_ms = [], []
for _ in range(N):
    torch.cuda.synchronize(); t = time.perf_counter(); p.run_batches(xs, outs=ys)
    walls.append((time.perf_counter() - t) * 1e3); inner_ms.append(p.stats.wall_ms)
gc.callbacks.remove(gccb)
print(f"per run: outer {statistics.median(walls):.3f} ms, stats.wall {statistics.median(inner_ms):.3f} ms, "
      f"outside {statistics.median([a - b for a, b in zip(walls, inner_ms)]):.3f} ms", flush=True)
print(f"gc: {len(gcs)} collections in {N} runs, {sum(s for _, s in gcs) * 1e3 / N:.3f} ms/run; by generation "
      f"{collections.Counter(g for g, _ in gcs)}", flush=True)
for label, (n, s) in sorted(acc.items(), key=lambda kv: -kv[1][1]):
    print(f"  {s / N * 1e3:8.3f} ms/run  {n / N:6.1f} calls/run  {label}")
