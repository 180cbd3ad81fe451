"""p181: the skinny kernel's builds (columns per block x ring stages) on the decoder stack's decode
shapes (K x N: wo 2048 x 2048, wqkv 2048 x 6144, w_gate_up 2048 x 11264, w_down 5632 x 2048, lm_head 2048 x
32000) and two more, 1/8/32 rows, bf16, CUDA graph cycling over copies of B larger than L2 ('cold'), x cuBLAS.
Every result checked against float32 first."""
import statistics
import torch
from fullpipe.kernels import skinny_gemm as sk

dev = torch.device("cuda")
KN = [(2048, 2048), (2048, 6144), (2048, 11264), (5632, 2048), (2048, 32000), (4096, 4096), (4096, 1024)]
BUILDS = [(128, 4), (128, 6), (64, 4), (64, 8)]


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


print(f"{'M x K x N':>16} {'cuBLAS us':>9} " + " ".join(f"{f'n{t}s{st}':>10}" for t, st in BUILDS) + "   (x cuBLAS)")
bad = 0
for k, n in KN:
    for m in (1, 8, 32):
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        copies = max(1, -(-160 * 2**20 // (k * n * 2)))
        bs = [torch.randn(k, n, device=dev, dtype=torch.bfloat16) for _ in range(copies)]
        c = torch.empty((m, n), device=dev, dtype=torch.bfloat16)
        ref = a.float() @ bs[0].float()
        for bld in BUILDS:
            c.fill_(float("nan")); sk.gemm_skinny(a, bs[0], out=c, _build=bld); torch.cuda.synchronize()
            err = ((c.float() - ref).norm() / ref.norm()).item()
            if not err < 1e-2:
                bad += 1
                print("WRONG", m, k, n, bld, err, flush=True)
        t_c = min(graph_ms([(lambda b=b: torch.matmul(a, b, out=c)) for b in bs], 4 * copies) for _ in range(2))
        ts = [min(graph_ms([(lambda b=b, bld=bld: sk.gemm_skinny(a, b, out=c, _build=bld)) for b in bs], 4 * copies)
                  for _ in range(2)) for bld in BUILDS]
        print(f"{f'{m}x{k}x{n}':>16} {t_c * 1e3:>9.1f} " + " ".join(f"{t_c / t:>10.2f}" for t in ts), flush=True)
print("wrong:", bad)
