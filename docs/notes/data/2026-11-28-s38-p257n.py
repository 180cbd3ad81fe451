"""p257n: under ncu at 1024 x 1024 x 4096 bf16: the 128 x 64 build in 1 x 2 clusters, with and without multicast."""
import dataclasses
import torch
from fullpipe.kernels import hopper_gemm as hg
torch.cuda.init()
m, n, k = 1024, 1024, 4096
a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
s12 = dataclasses.replace(hg.PERSISTENT_SMALL, cluster_n=2)
builds = [s12, dataclasses.replace(s12, multicast=False)]
for _ in range(2):
    for bl in builds:
        hg.gemm_hopper(a, b, out=c, _build=bl, _sk_tiles=0)
torch.cuda.synchronize()
