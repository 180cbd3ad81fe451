"""p184: B given transposed (x @ w.T, w an (N, K) weight as nn.Linear holds it) against B row-major, through
gemm(variant="hopper") (the skinny kernel for few rows, else the persistent rung), beside cuBLAS on the same
layout (F.linear(x, w) and x @ w.T contiguous). bf16, CUDA-graph replay; few-row products cycle over copies of w
larger than L2 (weights from HBM, as a decode step reads them). Results checked against float32 first."""
import statistics
import torch
import torch.nn.functional as F
from fullpipe.kernels import gemm

dev = torch.device("cuda")
SHAPES = [(1, 4096, 4096), (8, 4096, 4096), (8, 11008, 4096), (8, 4096, 11008), (64, 2048, 2048),
          (128, 6144, 4096), (512, 4096, 4096), (2048, 11008, 4096), (4096, 4096, 4096), (8192, 8192, 8192)]


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


print(f"{'M x N x K':>18} {'cuBLAS w.T us':>13} {'cuBLAS B us':>11} {'fp w.T':>7} {'fp B':>7}   (x cuBLAS of the same layout)")
bad = 0
for m, n, k in SHAPES:
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    copies = max(1, -(-160 * 2**20 // (k * n * 2))) if m <= 128 else 1
    ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) for _ in range(copies)]
    bs = [w.T.contiguous() for w in ws]
    c = torch.empty((m, n), device=dev, dtype=torch.bfloat16)
    ref = x.float() @ bs[0].float()
    s = torch.cuda.current_stream()
    for b in (ws[0].T, bs[0]):
        c.fill_(float("nan")); gemm(x, b, variant="hopper", out=c, stream=s); torch.cuda.synchronize()
        err = ((c.float() - ref).norm() / ref.norm()).item()
        if not err < 1e-2:
            bad += 1
            print("WRONG", m, n, k, b.is_contiguous(), err, flush=True)
    reps = 4 * copies if m <= 128 else max(3, int(2e11 // (2 * m * n * k)))
    reps = min(reps, 200)
    t = {}
    t["cw"] = min(graph_ms([(lambda w=w: torch.matmul(x, w.T, out=c)) for w in ws], reps) for _ in range(2))
    t["cb"] = min(graph_ms([(lambda b=b: torch.matmul(x, b, out=c)) for b in bs], reps) for _ in range(2))
    t["fw"] = min(graph_ms([(lambda w=w: gemm(x, w.T, variant="hopper", out=c, stream=torch.cuda.current_stream()))
                            for w in ws], reps) for _ in range(2))
    t["fb"] = min(graph_ms([(lambda b=b: gemm(x, b, variant="hopper", out=c, stream=torch.cuda.current_stream()))
                            for b in bs], reps) for _ in range(2))
    print(f"{f'{m}x{n}x{k}':>18} {t['cw'] * 1e3:>13.1f} {t['cb'] * 1e3:>11.1f} {t['cw'] / t['fw']:>7.2f} "
          f"{t['cb'] / t['fb']:>7.2f}", flush=True)
print("wrong:", bad)
