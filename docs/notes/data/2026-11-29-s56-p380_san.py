"""Small transposed products for compute-sanitizer: whole tiles, stream-K, clusters of 2 and one block, 64-row blocks."""
import torch
from fullpipe.kernels import hopper_gemm as hg
for (m, n, k, tm, cm, sk) in [(200, 512, 256, 128, 2, None), (65, 1000, 520, 128, 1, None), (177, 512, 4096, 128, 1, None),
                              (96, 768, 2048, 64, 1, None), (129, 1024, 1024, 128, 2, None), (200, 4096, 4096, 128, 2, 16)]:
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    y = hg.gemm_hopper(x, w.T, _build=hg.swap_build(m, tm, cm), _sk_tiles=sk)
    torch.cuda.synchronize()
    err = ((y.float() - x.float() @ w.float().T).norm() / (x.float() @ w.float().T).norm()).item()
    print(m, n, k, tm, cm, sk, f"{err:.2e}", flush=True)
