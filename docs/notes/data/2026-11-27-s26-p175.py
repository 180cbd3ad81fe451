"""p175: products of at most 128 rows (decode-like): one block a cluster (the new default) against the
2-block cluster build, by CUDA-graph replay, beside torch.matmul."""
import statistics
import torch
from fullpipe.kernels import hopper_gemm as hg


def graph_ms(fn, n=20):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        fn(); fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    g.replay(); torch.cuda.synchronize()
    ts = []
    for _ in range(7):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b) / n)
    return statistics.median(ts)


for m in (8, 32, 128):
    for k, n in ((2048, 32000), (4096, 4096), (4096, 11008), (11008, 4096), (2048, 6144)):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16); w = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        ref = a.float() @ w.float()
        hg.gemm_hopper(a, w, out=out); torch.cuda.synchronize()
        err = float((out.float() - ref).norm() / ref.norm())
        tt = graph_ms(lambda: torch.matmul(a, w, out=out))
        t2 = graph_ms(lambda: hg.gemm_hopper(a, w, out=out, _build=hg.PERSISTENT))
        t1 = graph_ms(lambda: hg.gemm_hopper(a, w, out=out))
        gbs = (k * n * 2) / 1e6
        print(f"({m}, {k}, {n}): torch {tt * 1e3:.1f} us ({gbs / tt:.0f} GB/s of weights) | 2-block clusters {t2 * 1e3:.1f} us "
              f"({tt / t2:.2f}) | one block {t1 * 1e3:.1f} us ({tt / t1:.2f}) err {err:.0e}", flush=True)
