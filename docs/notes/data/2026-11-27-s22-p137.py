"""p137 (session 22): a few small batches per call, as a server with a handful of requests would send them:
pipe.run_batches(xs) of k batches of 64-256 KiB (x*2, bf16 MLP), pageable torch, against the naive loop
(f(x.cuda()).cpu() per batch) and against pipe.run() of each batch; interleaved call by call, every
contender in every position, medians of 200, us; stats of the last run_batches."""
import time, statistics
import torch, fullpipe as fp
perf = time.perf_counter
pool = fp.DevicePool(0, release_threshold="max")
lin = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 1024)).cuda().to(torch.bfloat16).eval()
@torch.inference_mode()
def mlp(x):
    return lin(x.to(torch.bfloat16)).float()
def interleaved(fns, n=200):
    for _ in range(10):
        for fn in fns: fn()
    ts = [[] for _ in fns]
    m = len(fns)
    for i in range(n):
        for k in [(i + j) % m for j in range(m)]:
            t0 = perf(); fns[k](); ts[k].append(perf() - t0)
    return [statistics.median(t) * 1e6 for t in ts]
gen = torch.Generator().manual_seed(5)
print(f"{'compute':8s} {'k':>3s} {'KiB each':>8s}  naive loop   run_batches (x naive)   run() each (x naive)")
for fname, f in (("x*2", lambda x: x * 2), ("bf16 MLP", mlp)):
    pipe = fp.StreamPipeline(f, pool=pool)
    for k in (2, 4, 16):
        for kb in (64, 256):
            xs = [torch.randn(int(torch.randint(kb * 128 // 1024, kb * 256 // 1024 + 1, (1,), generator=gen)), 1024, generator=gen)
                  for _ in range(k)]
            ref = [f(x.cuda()).cpu() for x in xs]
            ys = pipe.run_batches(xs)
            assert all(torch.equal(a, b) for a, b in zip(ys, ref))
            naive, rb, each = interleaved([lambda: [f(x.cuda(non_blocking=True)).cpu() for x in xs],
                                           lambda: pipe.run_batches(xs), lambda: [pipe.run(x) for x in xs]])
            st = pipe.stats
            pipe.run_batches(xs); st = pipe.stats
            print(f"{fname:8s} {k:3d} {kb:8d}  {naive:9.1f}   {rb:9.1f} ({naive / rb:.2f}x)   {each:9.1f} ({naive / each:.2f}x)   "
                  f"staging {st.staging} wall {st.wall_ms * 1e3:.0f} us", flush=True)
    pipe.close()
