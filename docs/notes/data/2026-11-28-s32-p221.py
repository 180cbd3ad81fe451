"""Session 32: lists of tiny batches and single small requests, where fullpipe was slower
than the naive loop (p200: 0.69x naive; the call 194 us inside fullpipe against ~100
alone). Alternating rounds in one process; medians. Per variant the wall time and the
median host time of f's call (timed inside f). Then fullpipe's stats and a cProfile."""
import cProfile, io, pstats, statistics, sys, time
import numpy as np, torch
import fullpipe as fp
from fullpipe.experiments.workloads import _HandPipeline

tdev = torch.device("cuda")
CALLS = []
with torch.device("cuda"):
    mlp = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).eval()


def mlpf(x):
    t0 = time.perf_counter()
    with torch.inference_mode():
        y = mlp(x)
    CALLS.append(time.perf_counter() - t0)
    return y


tiny = [torch.randn(int(r), 512) for r in np.random.default_rng(1).integers(4, 33, 300)]
tiny_pin = [t.pin_memory() for t in tiny]
same = [torch.randn(32, 512) for _ in range(300)]
dev = [x.to(tdev) for x in tiny]
s1 = torch.cuda.Stream(); s3 = [torch.cuda.Stream() for _ in range(3)]
default = torch.cuda.default_stream()


def alone(streams):
    for i, x in enumerate(dev):
        torch.cuda.set_stream(streams[i % len(streams)])
        mlpf(x)
    torch.cuda.set_stream(default)
    for s in streams:
        s.synchronize()


def naive(xs):
    for x in xs:
        mlpf(x.to(tdev)).cpu()


def copies3(xs):
    outs = []
    for i, x in enumerate(xs):
        torch.cuda.set_stream(s3[i % 3])
        y = mlpf(x.to(tdev, non_blocking=True))
        outs.append(y.to("cpu", non_blocking=True))
    torch.cuda.set_stream(default)
    torch.cuda.synchronize()


ys = [torch.empty(t.shape[0], 512) for t in tiny]
hand = _HandPipeline(torch, tdev, mlpf, tiny, ys)
p_def, p_pin, p_1 = fp.StreamPipeline(mlpf), fp.StreamPipeline(mlpf), fp.StreamPipeline(mlpf, streams=1)
p_same = fp.StreamPipeline(mlpf)
ref = [mlpf(x.to(tdev)).cpu() for x in tiny]
got = p_def.run_batches(tiny)
print("max error", max(float((g - r).abs().max()) for g, r in zip(got, ref)))
V = {"alone 1 stream": lambda: alone([s1]), "alone 3 streams": lambda: alone(s3), "naive": lambda: naive(tiny),
     "copies 3 streams, pinned by torch": lambda: copies3(tiny), "hand pipeline": lambda: hand(tiny, ys),
     "fullpipe defaults": lambda: p_def.run_batches(tiny), "fullpipe pinned": lambda: p_pin.run_batches(tiny_pin),
     "fullpipe streams=1": lambda: p_1.run_batches(tiny), "fullpipe 300 x 32 rows": lambda: p_same.run_batches(same),
     "naive 300 x 32 rows": lambda: naive(same)}
for fn in V.values():
    fn(); fn()
res = {k: [] for k in V}; items = list(V.items())
for r in range(9):
    for k, fn in items[r % len(items):] + items[:r % len(items)]:
        torch.cuda.synchronize(); CALLS.clear()
        t0 = time.perf_counter(); fn(); ms = (time.perf_counter() - t0) * 1e3
        res[k].append((ms, statistics.median(CALLS) * 1e6))
a = statistics.median(m for m, _ in res["alone 1 stream"]); nv = statistics.median(m for m, _ in res["naive"])
for k, v in res.items():
    m = statistics.median(x for x, _ in v); c = statistics.median(x for _, x in v)
    print(f"  {k:36s} {m:6.1f} ms {a / m:4.2f}x alone {nv / m:4.2f}x naive  call {c:6.1f} us  {[round(x) for x, _ in v]}")
for k, p in (("defaults", p_def), ("pinned", p_pin), ("streams=1", p_1), ("32 rows", p_same)):
    st = p.stats
    print(f"--- {k}: host_us {({a: round(b, 1) for a, b in st.host_us.items()})} staging {st.staging} "
          f"group {st.call_group} prefetch {st.prefetch} padded {st.padded} bulk_uploads {st.bulk_uploads} "
          f"wall {st.wall_ms:.1f} loop/batch {st.loop_us_per_batch:.1f}")
print(p_def.stats)

# single small requests: one run per request
one = torch.randn(32, 512)
p_one = fp.StreamPipeline(mlpf)
R = {"run(x) 32 rows": lambda: p_one.run(one), "run_batches([x])": lambda: p_one.run_batches([one]),
     "naive": lambda: mlpf(one.to(tdev)).cpu()}
for k, fn in R.items():
    for _ in range(20):
        fn()
    t0 = time.perf_counter()
    for _ in range(200):
        fn()
    print(f"single request, {k}: {(time.perf_counter() - t0) / 200 * 1e6:.1f} us")
print(p_one.stats)

prof = cProfile.Profile(); prof.enable()
for _ in range(3):
    p_def.run_batches(tiny)
prof.disable()
s = io.StringIO(); pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(40); print(s.getvalue()[:8000])
s = io.StringIO(); pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats("fullpipe", 45); print(s.getvalue()[:8000])
prof = cProfile.Profile(); prof.enable()
for _ in range(100):
    p_one.run(one)
prof.disable()
s = io.StringIO(); pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats("fullpipe", 45); print(s.getvalue()[:8000])
