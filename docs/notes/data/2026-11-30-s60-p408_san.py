"""p408 (session 60): small products through 64-row pair builds of the transposed product, for compute-sanitizer."""
import torch
from fullpipe.kernels import hopper_gemm as hg
for m, n, k, t in [(129, 1000, 520, 1), (300, 520, 1032, 2), (177, 264, 2048, 1)]:
    torch.manual_seed(m)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16); w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    for b in (w.T, w.T.contiguous()):
        for sk in (None, 0):
            o = hg.gemm_hopper(x, b, _build=hg.swap_build(m, 64, 2, t), _sk_tiles=sk)
            torch.cuda.synchronize()
            e = ((o.float() - x.float() @ w.float().T).norm() / (x.float() @ w.float().T).norm()).item()
            print(m, n, k, sk, f"{e:.2e}", "OK" if e < 1e-2 else "BAD")
