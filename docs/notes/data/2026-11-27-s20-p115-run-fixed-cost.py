"""p115 (session 20): the fixed cost of one run_batches run (imap pays it per window).
12 pinned 8 MiB float32 batches through a cheap torch function (x * 2): wall per run against
the same copies and kernels in a hand loop; then a cProfile of 50 runs."""
import cProfile, pstats, io, time, statistics, sys
import numpy as np, torch, fullpipe as fp

xs = [torch.randn(2048, 1024).pin_memory() for _ in range(12)]
f = lambda x: x * 2
pool = fp.DevicePool(0, release_threshold="max")
for timing in ("sampled", False):
    pipe = fp.StreamPipeline(f, pool=pool, timing=timing)
    outs = pipe.run_batches(xs)
    outs = [torch.empty_like(x).pin_memory() for x in xs]
    for _ in range(5):
        pipe.run_batches(xs, outs=outs)
    ts = []
    for _ in range(40):
        t0 = time.perf_counter(); pipe.run_batches(xs, outs=outs); ts.append(time.perf_counter() - t0)
    tn = []
    for _ in range(40):
        t0 = time.perf_counter(); pipe.run_batches(xs); tn.append(time.perf_counter() - t0)
    print(f"timing={timing}: run_batches(12 x 8 MiB pinned, outs=) median {statistics.median(ts)*1e3:.2f} ms "
          f"(min {min(ts)*1e3:.2f}); new outputs {statistics.median(tn)*1e3:.2f} ms", flush=True)
    print("  ", str(pipe.stats).replace("\n", "\n   "))
# the hand loop: same copies on 3 streams
ss = [torch.cuda.Stream() for _ in range(3)]
dev = [torch.empty(2048, 1024, device="cuda") for _ in range(3)]
def hand():
    for i, (x, o) in enumerate(zip(xs, outs)):
        s = ss[i % 3]
        with torch.cuda.stream(s):
            d = dev[i % 3]
            d.copy_(x, non_blocking=True)
            o.copy_(f(d), non_blocking=True)
    torch.cuda.synchronize()
for _ in range(5): hand()
th = []
for _ in range(40):
    t0 = time.perf_counter(); hand(); th.append(time.perf_counter() - t0)
print(f"hand loop (3 streams, pinned, same copies): median {statistics.median(th)*1e3:.2f} ms (min {min(th)*1e3:.2f})")
pipe = fp.StreamPipeline(f, pool=pool)
pipe.run_batches(xs, outs=outs)
pr = cProfile.Profile()
pr.enable()
for _ in range(50):
    pipe.run_batches(xs, outs=outs)
pr.disable()
s = io.StringIO()
pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(45)
print(s.getvalue()[:9000])
s = io.StringIO()
pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(25)
print(s.getvalue()[:5000])
