"""p129 (session 21): where a single small request's run goes (256 KiB and 4 MiB, pageable and pinned,
pipe.run(t) of x*2 against the naive torch call): per-call medians, then a cProfile of 200 calls each
(cumulative and own time), and the stats of the last call."""
import time, statistics, cProfile, pstats, io
import numpy as np, torch, fullpipe as fp
f = lambda x: x * 2
pool = fp.DevicePool(0, release_threshold="max")
def bench(fn, n=300):
    for _ in range(20): fn()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e6
for kb, pinned in ((256, False), (256, True), (4096, False)):
    t = torch.randn(kb * 256 // 1024, 1024)
    if pinned: t = t.pin_memory()
    pipe = fp.StreamPipeline(f, pool=pool)
    naive = bench(lambda: f(t.cuda(non_blocking=True)).cpu())
    a = bench(lambda: pipe.run(t))
    st = pipe.stats
    print(f"== {kb} KiB {'pinned' if pinned else 'pageable'}: naive {naive:.1f} us, fullpipe {a:.1f} us ({naive / a:.2f}x); "
          f"staging {st.staging} host_copies {st.host_copies}, batches {st.batches}, wall {st.wall_ms * 1e3:.0f} us, "
          f"gpu span {(st.gpu_span_ms or 0) * 1e3:.0f} us, host_us { {k: round(v) for k, v in st.host_us.items()} }", flush=True)
    pr = cProfile.Profile(); pr.enable()
    for _ in range(200): pipe.run(t)
    pr.disable()
    for key in ("cumulative", "tottime"):
        s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats(key).print_stats(22)
        print("\n".join(l[:170] for l in s.getvalue().splitlines()[6:32]))
