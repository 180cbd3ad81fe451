"""Small transposed products of a row-major b (a_mn_major), for compute-sanitizer: N off the 64-column chunks
(a chunk hanging past b's last column, a chunk wholly past it), K off the slice, whole tiles and stream-K, pairs
sharing x, one block, 64-row blocks, several tiles of rows."""
import dataclasses
import torch
from fullpipe.kernels import hopper_gemm as hg
for (m, n, k, tm, cm, t, sk) in [(200, 520, 256, 128, 2, 1, None), (200, 584, 264, 128, 1, 2, None),
                                 (300, 1000, 520, 128, 1, 3, None), (129, 776, 2048, 64, 1, 2, None),
                                 (161, 1032, 1032, 128, 1, 2, "all"), (520, 1024, 1024, 128, 2, 3, "all")]:
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    build = dataclasses.replace(hg.swap_build(m, tm, cm, t), a_mn_major=True)
    sk = hg.cluster_tiles(m, n, build) if sk == "all" else sk   # (every tile dealt out as K runs)
    y = hg.gemm_hopper(x, b, _build=build, _sk_tiles=sk)
    torch.cuda.synchronize()
    ref = x.float() @ b.float()
    print(m, n, k, build.label, sk, f"{((y.float() - ref).norm() / ref.norm()).item():.2e}", flush=True)
