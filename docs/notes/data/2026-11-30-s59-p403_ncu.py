"""p403: ncu on three products the 128 x 192 tiles change (b = w.T): the rule before, 128 x 192 tiles, and
cuBLAS, one launch each in this order per product, after one unprofiled warm-up of each."""
import torch
from fullpipe.kernels import hopper_gemm as hg
real = hg._wider_192
s = torch.cuda.current_stream()
for m, n, k in ((512, 6144, 4096), (1024, 6144, 4096), (640, 4096, 14336)):
    hg._wider_192 = lambda *a: None
    old = hg.default_build(m, n, k, 132, True)
    hg._wider_192 = real
    new = hg.default_build(m, n, k, 132, True)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    for b in (old, new):
        hg.gemm_hopper(x, w.T, stream=s, _build=b)
    torch.nn.functional.linear(x, w)
    torch.cuda.synchronize()
    print(m, n, k, old.label, new.label, flush=True)
    torch.cuda.nvtx.range_push(f"p{m}x{n}x{k}")
    for b in (old, new):
        hg.gemm_hopper(x, w.T, stream=s, _build=b)
    torch.nn.functional.linear(x, w)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
