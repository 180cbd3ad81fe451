"""Small products through the 128 x 192 builds, for compute-sanitizer: both layouts of b, pairs sharing W's
slice (boxes of 96 rows), 1 x 2 sharing A; N off 192 (W's edge cut into smaller boxes), K off the slice,
whole tiles and every tile dealt out as K runs (stream-K's partial sums)."""
import dataclasses
import torch
from fullpipe.kernels import hopper_gemm as hg
builds = [(hg.PERSISTENT_192, "w.T"), (hg.PERSISTENT_192, "row-major"), (hg.PERSISTENT_192_PAIR, "w.T"),
          (dataclasses.replace(hg.PERSISTENT_192, cluster_n=2), "row-major")]
for build, layout in builds:
    for (m, n, k, sk) in [(300, 1000, 520, None), (129, 392, 72, 0), (520, 776, 2056, "all")]:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        b = w.T if layout == "w.T" else w.T.contiguous()
        skt = hg.cluster_tiles(m, n, build) if sk == "all" else sk
        y = hg.gemm_hopper(x, b, _build=build, _sk_tiles=skt)
        torch.cuda.synchronize()
        ref = x.float() @ w.float().T
        print(m, n, k, build.label, layout, skt, f"{((y.float() - ref).norm() / ref.norm()).item():.2e}", flush=True)
