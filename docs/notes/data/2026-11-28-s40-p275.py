"""p275: why the edge-box kernel (p274) runs slower on interior tiles too: variants of it, each a copy of the planner
with its own source. old = session 39; new = edge boxes; v1 = new without prefetching the edge maps; v2 = v1 loading
whole boxes only (interior shapes only: its byte counts are cut at edges); v3 = v2 expecting SLICE_BYTES.
128 x 128 tiles; CUDA-graph replay of 40, 7 alternating rounds, medians."""
import functools, importlib.util, statistics, sys
import torch
from fullpipe.cuda import compiler

VARIANTS = {"old": (".dev/old/hopper_gemm.py", ".dev/old/gemm_hopper_persistent.cu"),
            "new": ("src/fullpipe/kernels/hopper_gemm.py", "src/fullpipe/kernels/gemm_hopper_persistent.cu"),
            "v1": ("src/fullpipe/kernels/hopper_gemm.py", ".dev/var/v1_noprefetch.cu"),
            "v2": ("src/fullpipe/kernels/hopper_gemm.py", ".dev/var/v2_wholeboxes.cu"),
            "v3": ("src/fullpipe/kernels/hopper_gemm.py", ".dev/var/v3_constbytes.cu")}
mods = {}
for name, (py, cu) in VARIANTS.items():
    spec = importlib.util.spec_from_file_location(f"fullpipe.kernels.hg_{name}", py)
    m = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = m
    spec.loader.exec_module(m)
    m._module = functools.lru_cache(maxsize=None)(
        (lambda cu: lambda variant, arch, defines: compiler.compile_file(cu, arch=arch, defines=dict(defines)))(cu))
    mods[name] = m


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


names = list(mods)
print(f"{'M x N x K':>16} {'cuBLAS':>7} " + " ".join(f"{n:>7}" for n in names) + "  (us)")
for m, n, k, interior in ((384, 3456, 5216, True), (256, 3456, 5216, True), (1024, 2048, 2048, True),
                          (258, 3456, 5216, False), (320, 3456, 5216, False)):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    fns = {"cuBLAS": lambda: torch.matmul(a, b, out=c)}
    for nm, mod in mods.items():
        if nm == "v2" and not interior:
            continue
        fns[nm] = (lambda mod: lambda: mod.gemm_hopper(a, b, out=c, _build=mod.PERSISTENT_NARROW, _sk_tiles=0))(mod)
        c.fill_(float("nan")); fns[nm](); torch.cuda.synchronize()
        err = ((c.float() - ref).norm() / ref.norm()).item()
        assert err < 1e-2, (nm, m, n, k, err)
    gs = {nm: graph(fn) for nm, fn in fns.items()}
    ts = {nm: [] for nm in gs}
    for r in range(7):
        for nm in (list(gs) if r % 2 else list(gs)[::-1]):
            ts[nm].append(time_us(gs[nm]))
    med = {nm: statistics.median(v) for nm, v in ts.items()}
    print(f"{f'{m}x{n}x{k}':>16} {med['cuBLAS']:>7.2f} " + " ".join(f"{med[x]:>7.2f}" if x in med else f"{'-':>7}" for x in names), flush=True)
