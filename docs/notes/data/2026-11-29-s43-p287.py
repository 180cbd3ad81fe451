"""p287 (session 43): two products in the new stream-K regime (one wave and a few tiles), for compute-sanitizer."""
import torch
from fullpipe.kernels import gemm, hopper_gemm as hg
for m, n, k, dt, wt in ((768, 5888, 1024, torch.bfloat16, False), (700, 5704, 1032, torch.float16, True)):
    b = hg.default_build(m, n, k, 132)
    print(m, n, k, "tiles", hg.cluster_tiles(m, n, b), "stream_k", hg.stream_k(hg.cluster_tiles(m, n, b), 66, -(-k // 64)))
    a = torch.randn(m, k, device="cuda", dtype=dt)
    w = torch.randn(n, k, device="cuda", dtype=dt).T if wt else torch.randn(k, n, device="cuda", dtype=dt)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
    gemm(a, w, variant="hopper", out=c, stream=torch.cuda.current_stream()); torch.cuda.synchronize()
    ref = a.float() @ w.float()
    err = ((c.float() - ref).norm() / ref.norm()).item()
    print("ok" if err < 1e-2 else "BAD", m, n, k, err)
