"""p406 (session 60): what cuBLAS runs at 300 tokens of Llama-3-8B's projections (b = w.T), beside the rule's
build: one call each under an NVTX range for ncu."""
import torch, torch.nn.functional as F
from fullpipe.kernels import gemm, hopper_gemm as hg
torch.manual_seed(0)
for m, n, k in [(300, 6144, 4096), (300, 4096, 4096), (300, 28672, 4096), (300, 4096, 14336)]:
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    st = torch.cuda.current_stream()
    for _ in range(3):
        F.linear(x, w); gemm(x, w.T, variant="hopper", stream=st)
    torch.cuda.synchronize()
    print(m, n, k, hg.default_build(m, n, k, 132, True).label, flush=True)
    torch.cuda.nvtx.range_push(f"p{m}x{n}x{k}")
    F.linear(x, w); gemm(x, w.T, variant="hopper", stream=st)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
