"""p247n: under ncu, one launch each of cuBLAS, the 128 x 64 build and the 128 x 128 build at 1024^2 x 64 and 1024^3."""
import torch
from fullpipe.kernels import hopper_gemm as hg
torch.cuda.init()
for m, n, k in [(1024, 1024, 64), (1024, 1024, 1024)]:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        torch.matmul(a, b, out=c)
        hg.gemm_hopper(a, b, out=c, _build=hg.PERSISTENT_SMALL)
        hg.gemm_hopper(a, b, out=c, _build=hg.PERSISTENT_NARROW)
    torch.cuda.synchronize()
