"""p265: what cuBLAS runs at the small products (ncu's LaunchStats: kernel name, grid, cluster, block), and ours."""
import torch
from fullpipe.kernels import hopper_gemm as hg
SHAPES = [(512, 512, 512), (512, 512, 4096), (1024, 1024, 1024), (1024, 1024, 4096), (256, 4096, 4096),
          (128, 4096, 4096), (2048, 1024, 2048), (768, 768, 8192)]
for m, n, k in SHAPES:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    torch.cuda.nvtx.range_push(f"{m}x{n}x{k}")
    torch.matmul(a, b, out=c)
    hg.gemm_hopper(a, b, out=c)
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
