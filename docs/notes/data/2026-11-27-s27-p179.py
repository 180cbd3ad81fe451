"""p179: one call each of the skinny GEMM and cuBLAS for a few decode-shaped products, for ncu (kernel time alone,
DRAM and L2 traffic); run under `ncu --clock-control none`."""
import torch
from fullpipe.kernels import skinny_gemm as sk

dev = torch.device("cuda")
for m, n, k in [(8, 4096, 4096), (16, 4096, 4096), (64, 4096, 4096), (8, 1024, 4096), (16, 1024, 4096)]:
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
    c = torch.empty((m, n), device=dev, dtype=torch.bfloat16)
    for _ in range(2):
        sk.gemm_skinny(a, b, out=c)
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    p = sk.plan(m, n, k, "bfloat16", resident_blocks=sk.resident_blocks(0, "sm_90a", sk.rows_build(m)))
    print(f"{m}x{n}x{k}: {p.grid} blocks, {p.runs} runs of {p.slices_per_run}", flush=True)
