"""p264: programmatic dependent launch of the persistent GEMM. Back-to-back launches of the default build with
the PDL attribute (DEPENDENT_LAUNCH, the kernel waits in griddepcontrol.wait) against the plain stream order,
beside cuBLAS, on single products repeated and on MLP chains (x @ W1 @ W2, LLM-like dims).
bf16, CUDA-graph replay of 40 launches (and eager loops of 40), warm, 9 alternating rounds, medians;
results checked first (the chains against torch's chain)."""
import statistics, time
import torch
from fullpipe.kernels import hopper_gemm as hg

SHAPES = [(512, 512, 512), (512, 512, 4096), (1024, 1024, 1024), (1024, 1024, 4096), (256, 4096, 4096),
          (2048, 1024, 2048), (128, 4096, 4096), (1024, 1024, 16384), (4096, 4096, 4096), (8192, 8192, 8192)]
CHAINS = [(128, 4096, 11008), (512, 4096, 11008), (2048, 4096, 11008), (1024, 2048, 8192)]


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


def time_graph(g, n=40):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); g.replay(); b.record(); b.synchronize()
    return a.elapsed_time(b) / n * 1e3


def time_eager(fn, n=40):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(10_000_000)  # (~5 ms: the launches queue up behind it, so the GPU's time is timed, not the host's)
    a.record()
    for _ in range(n):
        fn()
    b.record(); b.synchronize()
    return a.elapsed_time(b) / n * 1e3


def ours(pdl, fn):
    def run():
        hg.DEPENDENT_LAUNCH = pdl
        fn()
    return run


def measure(label, fns, check):
    """fns: name -> callable; check(name) -> rel err after one call."""
    for nm in fns:
        err = check(nm)
        if not err < 1e-2:
            print("WRONG", label, nm, err, flush=True)
            return False
    graphs = {nm: graph(f) for nm, f in fns.items()}
    names = list(fns)
    tg = {nm: [] for nm in names}
    te = {nm: [] for nm in names}
    for r in range(9):
        for nm in names[r % len(names):] + names[:r % len(names)]:
            tg[nm].append(time_graph(graphs[nm]))
            te[nm].append(time_eager(fns[nm]))
    g = {nm: statistics.median(v) for nm, v in tg.items()}
    e = {nm: statistics.median(v) for nm, v in te.items()}
    print(f"{label:>22} {g['cuBLAS']:>9.2f} {g['cuBLAS'] / g['nopdl']:>7.3f} {g['cuBLAS'] / g['pdl']:>7.3f} "
          f"{g['nopdl'] / g['pdl']:>7.3f} | {e['cuBLAS']:>9.2f} {e['cuBLAS'] / e['nopdl']:>7.3f} "
          f"{e['cuBLAS'] / e['pdl']:>7.3f} {e['nopdl'] / e['pdl']:>7.3f}", flush=True)
    del graphs
    return True


sms = torch.cuda.get_device_properties(0).multi_processor_count
print(torch.cuda.get_device_name(0), sms, "SMs")
print(f"{'':>22} {'graph: cuBLAS us':>17} {'x cuBLAS':>15} {'pdl/':>7} | {'eager: cuBLAS us':>17} {'x cuBLAS':>15} {'pdl/':>7}")
print(f"{'M x N x K':>22} {'':>9} {'nopdl':>7} {'pdl':>7} {'nopdl':>7} | {'':>9} {'nopdl':>7} {'pdl':>7} {'nopdl':>7}")
bad = 0
for m, n, k in SHAPES:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    fns = {"cuBLAS": lambda: torch.matmul(a, b, out=c),
           "nopdl": ours(False, lambda: hg.gemm_hopper(a, b, out=c)),
           "pdl": ours(True, lambda: hg.gemm_hopper(a, b, out=c))}

    def check(nm):
        c.fill_(float("nan")); fns[nm](); torch.cuda.synchronize()
        return ((c.float() - ref).norm() / ref.norm()).item()
    label = f"{m}x{n}x{k} {hg.default_build(m, n, k, sms).label}"
    bad += not measure(label, fns, check)
    del a, b, c, ref
    torch.cuda.empty_cache()

print("MLP chains y = (x @ W1) @ W2, x: M x D, W1: D x F, W2: F x D (two launches a call)")
for m, d, f in CHAINS:
    x = torch.randn(m, d, device="cuda", dtype=torch.bfloat16)
    w1 = torch.randn(d, f, device="cuda", dtype=torch.bfloat16) / d ** 0.5
    w2 = torch.randn(f, d, device="cuda", dtype=torch.bfloat16) / f ** 0.5
    h = torch.empty(m, f, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(m, d, device="cuda", dtype=torch.bfloat16)
    ref = (x @ w1) @ w2

    def chain_t():
        torch.matmul(x, w1, out=h); torch.matmul(h, w2, out=y)

    def chain_f():
        hg.gemm_hopper(x, w1, out=h); hg.gemm_hopper(h, w2, out=y)
    fns = {"cuBLAS": chain_t, "nopdl": ours(False, chain_f), "pdl": ours(True, chain_f)}

    def check(nm):
        y.fill_(float("nan")); h.fill_(float("nan")); fns[nm](); torch.cuda.synchronize()
        return ((y.float() - ref.float()).norm() / ref.float().norm()).item()
    bad += not measure(f"{m}x{d}x{f} chain", fns, check)
print("wrong:", bad)
