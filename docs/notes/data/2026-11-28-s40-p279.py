"""p279 (p278 with the old kernel beside the new): does the skinny kernel pay for A boxes that hang past M? Its A box is the ROWS build (8-128 rows) at
M rows: M = 33 loads a 64-row box, 31 rows past M. Timed as is and with A's map over a padded allocation (no rows
past the end), beside cuBLAS. CUDA-graph replay of 40, 7 alternating rounds, medians."""
import statistics
import torch
from fullpipe.kernels import hopper_gemm as hg
from fullpipe.kernels import skinny_gemm as sk
import importlib.util, sys
from fullpipe.cuda import compiler
spec = importlib.util.spec_from_file_location("fullpipe.kernels.skinny_gemm_old", ".dev/old/skinny_gemm.py")
old = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = old
spec.loader.exec_module(old)
old.compiler = type("C", (), {"compile_package_kernel": staticmethod(
    lambda src, **kw: compiler.compile_file(".dev/old/gemm_hopper_skinny.cu", **kw))})

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


print(f"{'M x N x K':>16} {'box':>4} {'cuBLAS':>7} {'new':>7} {'padded':>7} {'old':>7} (us)")
for m, n, k in ((33, 4096, 4096), (40, 4096, 4096), (64, 4096, 4096), (65, 4096, 4096), (72, 4096, 4096),
                (100, 4096, 4096), (128, 4096, 4096), (33, 11008, 4096), (17, 4096, 4096), (8, 4096, 4096),
                (24, 8192, 2048), (48, 2048, 8192), (120, 4096, 4096)):
    box = sk.rows_build(m)
    a_full = torch.randn(box, k, device="cuda", dtype=torch.bfloat16)
    a = a_full[:m]
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    gs = {"cuBLAS": graph(lambda: torch.matmul(a, b, out=c))}
    for nm, pad in (("skinny", False), ("padded", True)):
        sk._LAUNCHES.clear()
        PAD.clear()
        if pad:
            PAD[a.data_ptr()] = box
        fn = lambda: sk.gemm_skinny(a, b, out=c)
        c.fill_(float("nan")); fn(); torch.cuda.synchronize()
        assert ((c.float() - ref).norm() / ref.norm()).item() < 1e-2
        gs[nm] = graph(fn)
    PAD.clear()
    old._LAUNCHES.clear()
    fn = lambda: old.gemm_skinny(a, b, out=c)
    c.fill_(float("nan")); fn(); torch.cuda.synchronize()
    assert ((c.float() - ref).norm() / ref.norm()).item() < 1e-2
    gs["old"] = graph(fn)
    ts = {k_: [] for k_ in gs}
    for r in range(7):
        for k_ in (list(gs) if r % 2 else list(gs)[::-1]):
            ts[k_].append(time_us(gs[k_]))
    med = {k_: statistics.median(v) for k_, v in ts.items()}
    print(f"{f'{m}x{n}x{k}':>16} {box:>4} {med['cuBLAS']:>7.2f} {med['skinny']:>7.2f} {med['padded']:>7.2f} {med['old']:>7.2f}", flush=True)
