"""p250n: under ncu, 1024 x 1024 x 4096 (bf16): cuBLAS, the 128 x 64 build (one block, and 1 x 2 clusters sharing A),
the 128 x 128 build: is the 128 x 64 build's main loop short of L2 bandwidth?"""
import dataclasses
import torch
from fullpipe.kernels import hopper_gemm as hg
torch.cuda.init()
m, n, k = 1024, 1024, 4096
a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
builds = [hg.PERSISTENT_SMALL, dataclasses.replace(hg.PERSISTENT_SMALL, cluster_n=2), hg.PERSISTENT_NARROW]
for _ in range(2):
    torch.matmul(a, b, out=c)
    for bl in builds:
        hg.gemm_hopper(a, b, out=c, _build=bl, _sk_tiles=0)
torch.cuda.synchronize()
