"""p273: is the cost of a partial last tile row the A loads' out-of-bounds rows? M = 258 (and 288, 320) timed
as is, and with A's tensor map over a 384-row allocation (the same kernel, M, C map; no out-of-bounds A rows).
Also N edges: 3392 (a whole 64-column chunk past N in the last tile), 3400, 3456. Graph of 40, PDL on and off."""
import statistics
import torch
from fullpipe.kernels import hopper_gemm as hg

K = 5216
orig = hg.tensor_map_args
PAD = {}


def patched(name, address, rows, cols, *a, **kw):
    if name == "a" and address in PAD:
        rows = PAD[address]
    return orig(name, address, rows, cols, *a, **kw)


hg.tensor_map_args = patched


def graph(fn, n=40):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    g.replay(); torch.cuda.synchronize()
    return g


def time_us(g, n=40):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); g.replay(); b.record(); b.synchronize()
    return a.elapsed_time(b) / n * 1e3


print(f"{'M x N':>12} {'cuBLAS':>7} {'ours':>7} {'A padded':>8} {'ours noPDL':>10} {'padded noPDL':>12} (us)")
for m, n in ((258, 3456), (288, 3456), (320, 3456), (384, 3456), (384, 3392), (384, 3400), (258, 3392)):
    a_full = torch.randn(384, K, device="cuda", dtype=torch.bfloat16)
    a = a_full[:m]
    b = torch.randn(K, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    gs = {"cuBLAS": graph(lambda: torch.matmul(a, b, out=c))}
    for pdl in (True, False):
        hg.DEPENDENT_LAUNCH = pdl
        hg._LAUNCHES.clear()
        PAD.clear()
        fn = lambda: hg.gemm_hopper(a, b, out=c, _build=hg.PERSISTENT_NARROW, _sk_tiles=0)
        c.fill_(float("nan")); fn(); torch.cuda.synchronize()
        assert ((c.float() - ref).norm() / ref.norm()).item() < 1e-2
        gs["ours" + ("" if pdl else "-") ] = graph(fn)
        hg._LAUNCHES.clear()
        PAD[a.data_ptr()] = 384
        c.fill_(float("nan")); fn(); torch.cuda.synchronize()
        assert ((c.float() - ref).norm() / ref.norm()).item() < 1e-2
        gs["pad" + ("" if pdl else "-")] = graph(fn)
        PAD.clear()
    hg.DEPENDENT_LAUNCH = True
    ts = {k_: [] for k_ in gs}
    for r in range(7):
        for k_ in (list(gs) if r % 2 else list(gs)[::-1]):
            ts[k_].append(time_us(gs[k_]))
    med = {k_: statistics.median(v) for k_, v in ts.items()}
    print(f"{f'{m}x{n}':>12} {med['cuBLAS']:>7.2f} {med['ours']:>7.2f} {med['pad']:>8.2f} {med['ours-']:>10.2f} {med['pad-']:>12.2f}", flush=True)
