"""p247: the small build's fixed cost per launch. At K = 64 (one slice) and at a few small products, CUDA-graph
replay (40 launches, warm, 9 alternating rounds, medians): cuBLAS; the 128 x 64 build as it is; launched without the
cluster attribute (an implicit 1-block cluster); with its two cluster barriers as __syncthreads (valid for one block a
cluster); without the tensor-map prefetches; all three together."""
import functools, statistics
import torch
from fullpipe.cuda import compiler
from fullpipe.kernels import hopper_gemm as hg

SRC = compiler.package_source_path(hg.SOURCES["persistent"]).read_text()


def patched(name):
    t = SRC
    if "sync" in name:
        assert t.count("    fp_tma::cluster_sync();") == 2
        t = t.replace("    fp_tma::cluster_sync();", "    __syncthreads();")
    if "nopf" in name:
        for x in "abc":
            t = t.replace(f"        fp_tma::prefetch_map(map_{x});\n", "")
        assert "prefetch_map" not in t
    return t


_orig_mod, _orig_cfg = hg._module, hg._launch_config
PATCH = [""]


@functools.lru_cache(maxsize=None)
def _mod(variant, arch, defines, patch):
    src_patch = patch.replace("nocl", "")
    if variant != "persistent" or not src_patch.strip("+"):
        return _orig_mod(variant, arch, defines)
    return compiler.compile_source(patched(patch), name=f"p247_{patch}.cu", arch=arch, defines=dict(defines))


hg._module = lambda variant, arch, defines: _mod(variant, arch, defines, PATCH[0])
hg._launch_config = lambda grid, threads, smem, stream, cluster: _orig_cfg(
    grid, threads, smem, stream, None if ("nocl" in PATCH[0] and cluster == 1) else cluster)

SHAPES = [(512, 512, 64), (512, 512, 512), (1024, 1024, 64), (1024, 1024, 1024), (256, 4096, 4096), (2048, 2048, 64)]
PATCHES = ["", "nocl", "sync", "nopf", "nocl+sync+nopf"]


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


names = ["cuBLAS"] + [p or "as is" for p in PATCHES]
print(f"{'M x N x K':>16} " + " ".join(f"{n:>15}" for n in names) + "   (us a launch)", flush=True)
bad = 0
keep = []
for m, n, k in SHAPES:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    graphs = {"cuBLAS": graph(lambda: torch.matmul(a, b, out=c))}
    for p in PATCHES:
        PATCH[0] = p
        hg._LAUNCHES.clear()
        fn = lambda: hg.gemm_hopper(a, b, out=c, _build=hg.PERSISTENT_SMALL)
        c.fill_(float("nan")); fn(); torch.cuda.synchronize()
        err = ((c.float() - ref).norm() / ref.norm()).item()
        if not err < 1e-2:
            bad += 1
            print("WRONG", m, n, k, p, err, flush=True)
        graphs[p or "as is"] = graph(fn)
    PATCH[0] = ""
    hg._LAUNCHES.clear()
    keep.append(graphs)
    ts = {nm: [] for nm in names}
    for r in range(9):
        for nm in names[r % len(names):] + names[:r % len(names)]:
            ts[nm].append(time_us(graphs[nm]))
    print(f"{f'{m}x{n}x{k}':>16} " + " ".join(f"{statistics.median(ts[nm]):>15.2f}" for nm in names), flush=True)
print("wrong:", bad)

