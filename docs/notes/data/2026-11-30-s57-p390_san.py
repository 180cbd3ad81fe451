"""Small transposed products in several tiles of the product's rows, for compute-sanitizer: whole tiles and
stream-K, pairs along W's rows (x multicast), pairs along the product's rows (W multicast), one block, 64-row blocks."""
import torch
from fullpipe.kernels import hopper_gemm as hg
for (m, n, k, tm, cm, t, cn, sk) in [(200, 512, 256, 128, 2, 2, 1, None), (200, 512, 256, 128, 1, 2, 2, None),
                                     (300, 1000, 520, 128, 1, 3, 1, None), (129, 768, 2048, 64, 1, 2, 1, None),
                                     (161, 1024, 1032, 128, 1, 2, 2, 8), (520, 1024, 1024, 128, 2, 3, 1, 12)]:
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    y = hg.gemm_hopper(x, w.T, _build=hg.swap_build(m, tm, cm, t, cn), _sk_tiles=sk)
    torch.cuda.synchronize()
    ref = x.float() @ w.float().T
    print(m, n, k, tm, cm, t, cn, sk, f"{((y.float() - ref).norm() / ref.norm()).item():.2e}", flush=True)
