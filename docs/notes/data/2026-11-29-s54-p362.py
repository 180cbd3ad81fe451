"""p362: a timeline of one run on the caller's thread: entry and exit of fullpipe's functions (wrappers, this
thread only), consecutive calls of one function folded into one line; for (1) the variable-length list
(--quick's, defaults) and (2) u1's workload A (200 NumPy batches through a bf16 MLP) with compute_threads=1."""
import collections, functools, inspect, statistics, sys, threading, time
import numpy as np
import torch
import fullpipe as fp
from fullpipe.experiments import workloads as W
from fullpipe.pipeline import executor as E, plan as P, tensors as T, list_paths as LP, bulk as B, pageable as PG
from fullpipe.cuda import hotpath as H, interop as I, pin_cache as PC

dev = torch.device("cuda")
main = threading.get_ident()
events, on = [], [False]
SKIP_IN_LOOP = set()


def wrap(owner, name, label=None):
    static = inspect.getattr_static(owner, name)
    orig = getattr(owner, name)
    label = label or f"{getattr(owner, '__name__', '?')}.{name}"

    @functools.wraps(orig)
    def w(*a, **k):
        if not on[0] or threading.get_ident() != main:
            return orig(*a, **k)
        events.append((time.perf_counter(), "+", label))
        try:
            return orig(*a, **k)
        finally:
            events.append((time.perf_counter(), "-", label))
    setattr(owner, name, staticmethod(w) if isinstance(static, staticmethod) else w)


SP = E.StreamPipeline
for n, v in list(vars(SP).items()):
    if callable(v) and not n.startswith("__") and n not in ("stats",):
        try:
            wrap(SP, n)
        except Exception:
            pass
for mod, names in [(E, ["host_view", "_host_addresses", "_check_outputs_apart", "like_input", "free_collected",
                        "ensure_current", "busy_from_timings", "_scaled_busy", "_check_out_layout", "default_pin_cache"]),
                   (P, ["batches_from_list"]), (LP, ["list_key"])]:
    for n in names:
        if hasattr(mod, n):
            wrap(mod, n)
for cls in (E._OutsRead, E._Pins, E._Outputs, T.TensorCompute, LP.ListPaths, B.BulkStaging, PC.PinCache):
    for n, v in list(vars(cls).items()):
        if (callable(v) or isinstance(v, staticmethod)) and not n.startswith("__"):
            try:
                wrap(cls, n, f"{cls.__name__}.{n}")
            except Exception:
                pass
for n in ["memcpy_htod", "memcpy_dtoh", "launch", "event_record"]:
    if hasattr(H.HotPath, n):
        wrap(H.HotPath, n, f"HotPath.{n}")


def timeline(label, fn, runs=12):
    for _ in range(runs):
        fn()
    outs = []
    for r in range(5):
        events.clear()
        torch.cuda.synchronize()
        on[0] = True
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        on[0] = False
        outs.append((t1 - t0, t0, list(events)))
    outs.sort(key=lambda o: o[0])
    total, t0, evs = outs[2]
    print(f"== {label}: median-run outer {total * 1e3:.2f} ms ({[round(o[0] * 1e3, 2) for o in outs]})", flush=True)
    # fold: a line per (depth, function) run of consecutive calls; show start offset, inclusive time, count
    depth, stack, lines = 0, [], []
    for t, kind, name in evs:
        if kind == "+":
            stack.append((name, t))
        else:
            nm, ts = stack.pop()
            d = len(stack)
            if lines and lines[-1][0] == d and lines[-1][1] == nm and d > 0:
                l = lines[-1]
                l[3] += t - ts; l[4] += 1; l[5] = t
            else:
                lines.append([d, nm, ts, t - ts, 1, t])
    # lines are in exit order; sort by start
    lines.sort(key=lambda l: (l[2], l[0]))
    for d, nm, ts, incl, cnt, te in lines:
        if d > 9 or (incl < 8e-6 and d > 1) or nm.startswith('HotPath.'):
            continue
        print(f"  {(ts - t0) * 1e3:8.3f} ms  {'  ' * d}{nm:50s} {incl * 1e6:9.1f} us  x{cnt}")
    print(f"  {total * 1e3:8.3f} ms  end", flush=True)


gen = torch.Generator().manual_seed(1414)
w = W._variable_length(torch, dev, 256 * 1024, gen, seed=14)
p = fp.StreamPipeline(w.f)
timeline("variable-length, defaults, outs=", lambda: p.run_batches(w.xs, outs=w.ys), runs=14)
print("   path", (p.stats.list_path or {}).get("path"), "wall", round(p.stats.wall_ms, 2))

rng = np.random.default_rng(0)
mlp = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.SiLU(), torch.nn.Linear(2048, 2048), torch.nn.SiLU(),
                          torch.nn.Linear(2048, 256)).to(dev, torch.bfloat16).eval()


@torch.inference_mode()
def fa(x):
    return mlp(x.to(torch.bfloat16)).float()


xa = [rng.standard_normal((int(r), 512), dtype=np.float32) for r in rng.integers(64, 2048, 200)]
pa = fp.StreamPipeline(fa, compute_threads=1)
timeline("A, compute_threads=1, new outputs", lambda: pa.run_batches(xa))
print("   wall", round(pa.stats.wall_ms, 2), "staging", pa.stats.staging, "pinned", pa.stats.pinned)
