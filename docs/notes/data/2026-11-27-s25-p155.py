"""fullpipe's own host time per batch around a tensor function (run_batches, pageable), and
where it goes: 400 batches of 64 x 256 float32 through f(x) = x * 2 (a call of ~10 us), and
a cProfile of one run."""
import cProfile, pstats, io, time, statistics
import numpy as np, torch
import fullpipe as fp
rng = np.random.default_rng(0)
xs = [rng.random((64 + (i % 7), 256), dtype=np.float32) for i in range(400)]
def f(x):
    return x * 2
xd = torch.zeros(64, 256, device="cuda")
t0 = time.perf_counter()
for _ in range(1000): f(xd)
torch.cuda.synchronize(); print(f"bare call {1e3 * (time.perf_counter() - t0):.1f} us")
pipe = fp.StreamPipeline(f)
for r in range(4):
    t0 = time.perf_counter(); ys = pipe.run_batches(xs); ms = (time.perf_counter() - t0) * 1e3
    s = pipe.stats
    print(f"run {r}: {ms:.1f} ms = {ms * 1e3 / len(xs):.1f} us/batch; enqueue {s.enqueue_us_per_batch:.1f} us; host_us "
          + str({k: round(v, 1) for k, v in s.host_us.items()}) + f"; staging {s.staging}")
assert all(np.allclose(y, x * 2) for y, x in zip(ys, xs))
pr = cProfile.Profile(); pr.enable(); pipe.run_batches(xs); pr.disable()
out = io.StringIO(); pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(30); print(out.getvalue()[:6000])
