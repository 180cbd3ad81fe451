"""p245: where a small Hopper GEMM's time goes. Time against K at fixed M = N (CUDA-graph replay, warm,
bf16): the intercept is the fixed cost per launch, the slope the main loop's cost per 64-deep slice.
cuBLAS, the persistent rung (default build; one block a cluster; whole tiles), the tma and ws rungs,
and a 1-element add (the graph's own floor per kernel). Then the ws rung's role stamps at 1024^2 x K."""
import dataclasses, statistics
import numpy as np
import torch
from fullpipe.kernels import hopper_gemm as hg
from fullpipe.kernels.role_stamps import gemm_role_stamps


def graph_us(fn, n=40):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    g.replay(); torch.cuda.synchronize()
    ts = []
    for _ in range(9):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b) / n * 1e3)
    return statistics.median(ts)


sms = torch.cuda.get_device_properties(0).multi_processor_count
tiny = torch.zeros(1, device="cuda")
print(f"graph floor per kernel (1-element add): {graph_us(lambda: tiny.add_(1)):.2f} us", flush=True)
KS = [64, 256, 1024, 4096]
NAMES = ["cuBLAS", "default", "one-block", "whole", "tma", "ws"]
bad = 0
for mn in (512, 1024, 2048):
    rows = {nm: [] for nm in NAMES}
    for k in KS:
        a = torch.randn(mn, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, mn, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(mn, mn, device="cuda", dtype=torch.bfloat16)
        ref = a.float() @ b.float()
        d = hg.default_build(mn, mn, sms)
        one = dataclasses.replace(d, cluster_m=1)
        fns = {"cuBLAS": lambda: torch.matmul(a, b, out=c),
               "default": lambda: hg.gemm_hopper(a, b, out=c),
               "one-block": lambda: hg.gemm_hopper(a, b, out=c, _build=one),
               "whole": lambda: hg.gemm_hopper(a, b, out=c, _sk_tiles=0),
               "tma": lambda: hg.gemm_hopper(a, b, out=c, variant="tma"),
               "ws": lambda: hg.gemm_hopper(a, b, out=c, variant="ws")}
        for nm, fn in fns.items():
            c.fill_(float("nan")); fn(); torch.cuda.synchronize()
            err = ((c.float() - ref).norm() / ref.norm()).item()
            if not err < 1e-2:
                bad += 1; print("WRONG", mn, k, nm, err, flush=True)
        for nm, fn in fns.items():
            rows[nm].append(graph_us(fn))
        p = hg.plan("persistent", mn, mn, k, "bfloat16", build=d, max_clusters=hg.max_active_clusters(0, "sm_90a", d))
        print(f"  {mn}^2 x {k}: default {d.label} grid {p.grid} sk {p.sk_tiles}; "
              + " ".join(f"{nm} {rows[nm][-1]:.2f}" for nm in NAMES), flush=True)
    print(f"M=N={mn}: us at K = {KS}; fit a + b * slices (slices = K / 64)")
    sl = np.array(KS) / 64
    for nm in NAMES:
        bb, aa = np.polyfit(sl, rows[nm], 1)
        print(f"  {nm:>10}: " + " ".join(f"{t:7.2f}" for t in rows[nm]) + f"   fixed {aa:6.2f} us, {bb:6.3f} us/slice", flush=True)

print("\nws rung role stamps (ns from the first block's start; block 0 and the latest of the 4 stamped)")
for k in (64, 1024):
    a = torch.randn(1024, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, 1024, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        out, blocks = gemm_role_stamps(a, b)
    for bl in blocks:
        p0 = bl.producer_wait[0]
        w0 = bl.consumer_wait[0][0]
        m_last = max(wg[-1][1] for wg in bl.consumer_mma)
        ep = bl.epilogue
        print(f"  K={k} block {bl.block} sm {bl.sm}: span {bl.span[0]}-{bl.span[1]} ({bl.span[1]-bl.span[0]} ns); "
              f"first TMA issued {p0[1]}; first slice landed {w0[1]}; last wgmma retired {m_last}; "
              f"epilogue {min(e[0] for e in ep)}-{max(e[1] for e in ep)}; busy {bl.busy_fraction():.2f}", flush=True)
print("wrong:", bad)
