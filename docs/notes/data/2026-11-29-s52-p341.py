"""p341: host time of one eager gemm(x, w.T, variant="hopper") call (perf_counter over 2000 calls; the GPU is faster
than the host here) for products whose plan deals tiles out by K (stream-K: a workspace and a memset each call)
and ones that do not; the launch cache's size before and after (misses); cProfile of the slowest."""
import cProfile, io, pstats, time
import torch
from fullpipe.kernels import gemm, hopper_gemm as hg

s = torch.cuda.current_stream()
shapes = [(256, 1000, 2048, True), (200, 1008, 2048, False), (200, 1008, 2048, True), (2048, 1001, 2048, True),
          (512, 1001, 2048, True), (200, 2000, 2048, True)]
for m, n, k, wt in shapes:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    b = w.T if wt else torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    for kw in ({}, {"out": out}):
        for _ in range(20):
            gemm(a, b, variant="hopper", stream=s, **kw)
        torch.cuda.synchronize()
        n0 = len(hg._LAUNCHES)
        t0 = time.perf_counter()
        for _ in range(2000):
            gemm(a, b, variant="hopper", stream=s, **kw)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        t3 = time.perf_counter()
        for _ in range(2000):
            torch.matmul(a, b)
        t4 = time.perf_counter()
        torch.cuda.synchronize()
        print(f"RESULT {m}x{n}x{k} {'w.T' if wt else 'B  '} {'out=' if kw else 'None'}: host {1e6 * (t1 - t0) / 2000:6.1f} us "
              f"a call (to sync {1e6 * (t2 - t0) / 2000:6.1f}); torch.matmul host {1e6 * (t4 - t3) / 2000:6.1f}; "
              f"launch cache {n0} -> {len(hg._LAUNCHES)}", flush=True)
for m, n, k, wt in shapes[:1] + shapes[3:4]:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    b = w.T if wt else w
    for _ in range(20):
        gemm(a, b, variant="hopper", stream=s)
    torch.cuda.synchronize()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(2000):
        gemm(a, b, variant="hopper", stream=s)
    pr.disable()
    torch.cuda.synchronize()
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(25)
    print(f"PROFILE {m}x{n}x{k}\n" + buf.getvalue(), flush=True)
