"""p256: under ncu, shared-memory and tensor-pipe breakdown: cuBLAS, the 128 x 64 (one block), 128 x 128 at
1024 x 1024 x 4096, and cuBLAS, the 128 x 256 (2 x 1 clusters) at 4096^3 (bf16). Is the 128 x 64 build's main
loop short of shared-memory bandwidth (two warpgroups each read B; TMA writes 24 KiB a slice)?"""
import torch
from fullpipe.kernels import hopper_gemm as hg
torch.cuda.init()
for (m, n, k), builds in (((1024, 1024, 4096), [hg.PERSISTENT_SMALL, hg.PERSISTENT_NARROW]),
                          ((4096, 4096, 4096), [hg.PERSISTENT])):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(2):
        torch.matmul(a, b, out=c)
        for bl in builds:
            hg.gemm_hopper(a, b, out=c, _build=bl, _sk_tiles=0)
    torch.cuda.synchronize()
