"""p188: prefill-sized projections (M = 512-2048 tokens, Llama-7B/8B widths) on the persistent rung: the default
build against 128 x 256 and 128 x 128 tiles, each with its default stream-K (hopper_gemm.stream_k), none, and
stream-K over every cluster; beside cuBLAS. bf16, CUDA-graph replay cycling over 2 weight copies. Checked first."""
import dataclasses
import statistics
import torch
from fullpipe.kernels import hopper_gemm as hg

SHAPES = [(512, 11008, 4096), (512, 4096, 11008), (512, 14336, 4096), (512, 4096, 14336), (1024, 11008, 4096),
          (1024, 4096, 11008), (2048, 11008, 4096), (768, 4096, 4096)]
sms = torch.cuda.get_device_properties(0).multi_processor_count


def graph_ms(fns, n=20):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for f in fns:
            f()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(n):
            fns[i % len(fns)]()
    g.replay(); torch.cuda.synchronize()
    ts = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b) / n)
    return statistics.median(ts)


print(f"{'M x N x K':>18} {'default':>18} {'cuBLAS us':>9}  x cuBLAS: default | wide sk/none/all | narrow sk/none/all")
bad = 0
for m, n, k in SHAPES:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    bs = [torch.randn(k, n, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ bs[0].float()
    wide, narrow = (hg.PERSISTENT, hg.PERSISTENT_NARROW)
    cands = {"default": {}}
    for lab, bld in (("wide", wide), ("narrow", narrow)):
        t = hg.cluster_tiles(m, n, bld)
        cands[f"{lab} sk"] = {"_build": bld}
        cands[f"{lab} none"] = {"_build": bld, "_sk_tiles": 0}
        cands[f"{lab} all"] = {"_build": bld, "_sk_tiles": t}
    for name, kw in cands.items():
        c.fill_(float("nan")); hg.gemm_hopper(a, bs[0], out=c, **kw); torch.cuda.synchronize()
        err = ((c.float() - ref).norm() / ref.norm()).item()
        if not err < 1e-2:
            bad += 1
            print("WRONG", m, n, k, name, err, flush=True)
    t_c = min(graph_ms([(lambda b=b: torch.matmul(a, b, out=c)) for b in bs]) for _ in range(2))
    r = {name: t_c / min(graph_ms([(lambda b=b, kw=kw: hg.gemm_hopper(a, b, out=c, **kw)) for b in bs])
                         for _ in range(2)) for name, kw in cands.items()}
    d = hg.default_build(m, n, sms)
    print(f"{f'{m}x{n}x{k}':>18} {d.label:>18} {t_c * 1e3:>9.1f}  {r['default']:.2f} | "
          f"{r['wide sk']:.2f} {r['wide none']:.2f} {r['wide all']:.2f} | "
          f"{r['narrow sk']:.2f} {r['narrow none']:.2f} {r['narrow all']:.2f}", flush=True)
print("wrong:", bad)
