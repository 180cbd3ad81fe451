"""p305: the variable-length list at --quick's size (29 encoder batches) through fullpipe's defaults: the caller's
thread's time per run in each fullpipe function (inclusive, wrapped, main thread only), against the run's wall."""
import collections, functools, inspect, statistics, sys, threading, time, types
import torch
import fullpipe as fp
from fullpipe.experiments import workloads as W
from fullpipe.pipeline import executor as ex, bulk, tensors, protocol, list_paths, staging, pageable, plan, compute_threads, stats as stmod, records
from fullpipe.cuda import interop, pin_cache, pinned_pool

dev = torch.device("cuda")
gen = torch.Generator().manual_seed(1414)
tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 256 * 1024
w = W._variable_length(torch, dev, tokens, gen, seed=14)
xs, ys, f = w.xs, w.ys, w.f
main = threading.main_thread()
acc = collections.defaultdict(lambda: [0, 0.0])
on = [False]


def wrap(owner, name, fn, label):
    @functools.wraps(fn)
    def inner(*a, **k):
        if not on[0] or threading.current_thread() is not main:
            return fn(*a, **k)
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            e = acc[label]; e[0] += 1; e[1] += time.perf_counter() - t
    setattr(owner, name, inner)


def wrap_all(owner, prefix):
    for name, v in list(vars(owner).items()):
        if isinstance(v, types.FunctionType) and not inspect.isgeneratorfunction(v) and not name.startswith("__"):
            wrap(owner, name, v, f"{prefix}.{name}")
        elif name == "__init__" and isinstance(v, types.FunctionType):
            wrap(owner, name, v, f"{prefix}.__init__")


for mod in (ex, bulk, tensors, protocol, list_paths, staging, pageable, plan, interop, pin_cache, pinned_pool, compute_threads, stmod, records):
    for name, v in list(vars(mod).items()):
        if isinstance(v, type) and v.__module__ == mod.__name__:
            wrap_all(v, f"{mod.__name__.split('.')[-1]}.{name}")
        elif isinstance(v, types.FunctionType) and v.__module__ == mod.__name__ and not inspect.isgeneratorfunction(v):
            wrap(mod, name, v, f"{mod.__name__.split('.')[-1]}.{name}")
# (names imported into executor from elsewhere are looked up there: wrap those too)
for name in ("host_view", "like_input", "run_small_list", "ensure_current", "default_pin_cache", "free_collected"):
    if hasattr(ex, name) and isinstance(getattr(ex, name), types.FunctionType):
        wrap(ex, name, getattr(ex, name), f"executor-imported.{name}")

p = fp.StreamPipeline(f)
for _ in range(14):
    p.run_batches(xs, outs=ys)
print("list_path", p.stats.list_path, flush=True)
N = 50
walls, inner = [], []
on[0] = True
for _ in range(N):
    torch.cuda.synchronize(); t = time.perf_counter(); p.run_batches(xs, outs=ys)
    walls.append((time.perf_counter() - t) * 1e3); inner.append(p.stats.wall_ms)
on[0] = False
print(f"per run: outer {statistics.median(walls):.2f} ms, stats.wall {statistics.median(inner):.2f} ms", flush=True)
for label, (n, s) in sorted(acc.items(), key=lambda kv: -kv[1][1])[:70]:
    print(f"  {s / N * 1e3:8.3f} ms/run  {n / N:7.1f} calls/run  {label}")
on[0] = False
ts = []
for _ in range(20):
    torch.cuda.synchronize(); t = time.perf_counter(); p.run_batches(xs, outs=ys); ts.append((time.perf_counter() - t) * 1e3)
print(f"RESULT unwrapped... (still wrapped, off) outer {statistics.median(ts):.2f} ms, stats.wall {p.stats.wall_ms:.2f}")
