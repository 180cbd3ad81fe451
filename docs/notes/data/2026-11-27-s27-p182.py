"""p182: the skinny kernel's default build (skinny_gemm.columns_build: 64 columns and 8 stages where 64-column
tiles fit one wave) against the 128-column, 4-stage build it replaced, and cuBLAS, at 1-128 rows, bf16, weights
from HBM (a CUDA graph cycling over copies of B larger than L2). Results checked against float32 first."""
import statistics
import torch
from fullpipe.kernels import skinny_gemm as sk

dev = torch.device("cuda")
KN = [(2048, 2048), (2048, 6144), (5632, 2048), (4096, 4096), (4096, 1024), (4096, 11008)]
MS = (1, 8, 32, 64, 128)


def graph_ms(fns, n):
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


sms = torch.cuda.get_device_properties(0).multi_processor_count
print(f"{'M x K x N':>16} {'build':>6} {'cuBLAS us':>9} {'default':>8} {'n128s4':>8}   (x cuBLAS)")
bad = 0
for k, n in KN:
    for m in MS:
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        copies = max(1, -(-160 * 2**20 // (k * n * 2)))
        bs = [torch.randn(k, n, device=dev, dtype=torch.bfloat16) for _ in range(copies)]
        c = torch.empty((m, n), device=dev, dtype=torch.bfloat16)
        ref = a.float() @ bs[0].float()
        for bld in (None, (128, 4)):
            c.fill_(float("nan")); sk.gemm_skinny(a, bs[0], out=c, _build=bld); torch.cuda.synchronize()
            err = ((c.float() - ref).norm() / ref.norm()).item()
            if not err < 1e-2:
                bad += 1
                print("WRONG", m, k, n, bld, err, flush=True)
        t_c = min(graph_ms([(lambda b=b: torch.matmul(a, b, out=c)) for b in bs], 4 * copies) for _ in range(2))
        t = [min(graph_ms([(lambda b=b, bld=bld: sk.gemm_skinny(a, b, out=c, _build=bld)) for b in bs], 4 * copies)
                 for _ in range(2)) for bld in (None, (128, 4))]
        tn, st = sk.columns_build(n, sms)
        print(f"{f'{m}x{k}x{n}':>16} {f'n{tn}s{st}':>6} {t_c * 1e3:>9.1f} {t_c / t[0]:>8.2f} {t_c / t[1]:>8.2f}",
              flush=True)
print("wrong:", bad)
