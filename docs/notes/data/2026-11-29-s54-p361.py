"""p361: (1) the variable-length list (--quick's, defaults): exclusive time per function on the caller's thread
(sys.setprofile, this thread only; C calls too), 20 runs; (2) u1's workload A (a NumPy list of 200 variable-row
f32 batches through a bf16 MLP) and C (4000 tiny batches through a Linear): stats by way."""
import collections, statistics, sys, time, threading
import numpy as np
import torch
import fullpipe as fp
from fullpipe.experiments import workloads as W

dev = torch.device("cuda")
stream = torch.cuda.Stream()
what = sys.argv[1] if len(sys.argv) > 1 else "all"


def alone_fn(f, xs_dev):
    def run():
        with torch.cuda.stream(stream):
            for x in xs_dev:
                f(x)
        stream.synchronize()
    return run


def med_rounds(contenders, k=7):
    ts = {n: [] for n, _ in contenders}
    for _ in range(k):
        for n, fn in contenders:
            torch.cuda.synchronize(); t = time.perf_counter(); fn(); torch.cuda.synchronize()
            ts[n].append((time.perf_counter() - t) * 1e3)
    return {n: statistics.median(v) for n, v in ts.items()}


def show(label, st, ms, n):
    lp = st.list_path or {}
    print(f"   {label}: {ms:.2f} ms = {ms * 1e3 / n:.0f} us/batch; wall {st.wall_ms:.2f}; path {lp.get('path')} "
          f"{ {k: v for k, v in lp.items() if k.endswith('per_batch')} }; staging {st.staging}; host_us "
          f"{ {k: round(v) for k, v in (st.host_us or {}).items()} }; enqueue/batch {st.enqueue_us_per_batch:.0f}; "
          f"loop/batch {getattr(st, 'loop_us_per_batch', 0):.0f}; batches {st.batches}", flush=True)


if what in ("all", "prof"):
    gen = torch.Generator().manual_seed(1414)
    w = W._variable_length(torch, dev, 256 * 1024, gen, seed=14)
    xs, ys, f = w.xs, w.ys, w.f
    p = fp.StreamPipeline(f)
    for _ in range(14):
        p.run_batches(xs, outs=ys)
    tot, cnt = collections.defaultdict(float), collections.defaultdict(int)
    stack = []

    def prof(frame, event, arg):
        t = time.perf_counter()
        if event == "call" or event == "c_call":
            if event == "call":
                c = frame.f_code
                key = f"{c.co_filename.rsplit('/', 2)[-1]}:{c.co_name}"
            else:
                key = f"C {getattr(arg, '__qualname__', None) or getattr(arg, '__name__', '?')} <- {frame.f_code.co_name}"
            stack.append([key, t, 0.0])
        elif event in ("return", "c_return", "c_exception"):
            if not stack:
                return
            key, t0, child = stack.pop()
            dt = time.perf_counter() - t0
            tot[key] += dt - child
            cnt[key] += 1
            if stack:
                stack[-1][2] += dt

    outer, walls = [], []
    for _ in range(20):
        torch.cuda.synchronize()
        stack.clear()
        t = time.perf_counter()
        sys.setprofile(prof)
        p.run_batches(xs, outs=ys)
        sys.setprofile(None)
        outer.append((time.perf_counter() - t) * 1e3); walls.append(p.stats.wall_ms)
    print(f"profiled: outer {statistics.median(outer):.2f} ms, wall {statistics.median(walls):.2f} ms", flush=True)
    for k, v in sorted(tot.items(), key=lambda kv: -kv[1])[:70]:
        print(f"   {v / 20 * 1e6:9.1f} us/run excl  {cnt[k] / 20:7.1f} calls/run  {k}")

if what in ("all", "a"):
    rng = np.random.default_rng(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.SiLU(), torch.nn.Linear(2048, 2048), torch.nn.SiLU(),
                              torch.nn.Linear(2048, 256)).to(dev, torch.bfloat16).eval()

    @torch.inference_mode()
    def fa(x):
        return mlp(x.to(torch.bfloat16)).float()
    xa = [rng.standard_normal((int(r), 512), dtype=np.float32) for r in rng.integers(64, 2048, 200)]
    xa_dev = [torch.from_numpy(x).to(dev) for x in xa]
    print("== A: 200 numpy batches (64-2048 rows x 512 f32) -> bf16 MLP", flush=True)
    pipes = {"defaults": fp.StreamPipeline(fa), "threads=1": fp.StreamPipeline(fa, compute_threads=1),
             "threads=3": fp.StreamPipeline(fa, compute_threads=3)}
    for name, pp in pipes.items():
        for _ in range(12):
            pp.run_batches(xa)
    outs = [np.empty((x.shape[0], 256), np.float32) for x in xa]
    for _ in range(3):
        pipes["defaults"].run_batches(xa, outs=outs)
    conts = [("alone", alone_fn(fa, xa_dev))] + [(k, (lambda pp=pp: pp.run_batches(xa))) for k, pp in pipes.items()]
    conts.append(("defaults outs=", lambda: pipes["defaults"].run_batches(xa, outs=outs)))
    m = med_rounds(conts, k=5)
    print(f"   alone {m['alone']:.2f} ms = {m['alone'] * 5:.0f} us/batch", flush=True)
    for name, pp in pipes.items():
        pp.run_batches(xa)
        show(name, pp.stats, m[name], len(xa))
    pipes["defaults"].run_batches(xa, outs=outs)
    show("defaults outs=", pipes["defaults"].stats, m["defaults outs="], len(xa))
    print("   pinned", pipes["defaults"].stats.pinned, flush=True)

if what in ("all", "c"):
    lin = torch.nn.Linear(256, 256).to(dev).eval()

    @torch.inference_mode()
    def fc(x):
        return lin(x)
    xc = [torch.randn(16, 256) for _ in range(4000)]
    xc_dev = [x.to(dev) for x in xc]
    print("== C: 4000 torch batches (16 x 256 f32) -> Linear", flush=True)
    pc = fp.StreamPipeline(fc)
    for _ in range(12):
        pc.run_batches(xc)
    naive = lambda: [fc(x.to(dev)).cpu() for x in xc]
    m = med_rounds([("alone", alone_fn(fc, xc_dev)), ("naive", naive), ("fp", lambda: pc.run_batches(xc))], k=5)
    print(f"   alone {m['alone']:.2f} naive {m['naive']:.2f} fullpipe {m['fp']:.2f} ms", flush=True)
    pc.run_batches(xc)
    show("defaults", pc.stats, m["fp"], len(xc))
