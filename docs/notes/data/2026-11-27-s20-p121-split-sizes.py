"""p121 (session 20): where splitting a small run starts to pay: pipe.run(x) of 2-32 MiB (pinned
and pageable, x * 2 and a heavier compute) in 1, 2, 4, 6 even chunks, against the naive call."""
import time, statistics, numpy as np, torch, fullpipe as fp
pool = fp.DevicePool(0, release_threshold="max")
W = torch.randn(1024, 1024, device="cuda")
fs = {"x*2": lambda x: x * 2, "matmul x4": lambda x: (((x @ W) @ W) @ W) @ W}
def bench(fn, n=60):
    for _ in range(8): fn()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e6
for fname, f in fs.items():
    pipes = {k: fp.StreamPipeline(f, pool=pool, chunk="1 rows") for k in (1, 2, 4, 6)}
    for mib in (2, 4, 8, 16, 32):
        for pinned in (True, False):
            t = torch.randn(mib * 256, 1024)
            if pinned: t = t.pin_memory()
            rows = t.shape[0]
            naive = bench(lambda: f(t.cuda(non_blocking=True)).cpu())
            res = []
            for k, p in pipes.items():
                p.chunk = -(-rows // k)
                res.append(bench(lambda: p.run(t)))
            best = min(range(4), key=lambda i: res[i])
            print(f"{fname:9s} {mib:3d} MiB {'pinned' if pinned else 'pageable':8s} naive {naive:7.0f} | chunks 1/2/4/6: "
                  + " ".join(f"{r:7.0f}" for r in res) + f" | best {[1,2,4,6][best]} chunks = {naive / res[best]:.2f}x naive", flush=True)
