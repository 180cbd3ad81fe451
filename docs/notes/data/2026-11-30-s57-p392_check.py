"""p392: gemm(x, w.T, variant="hopper") on the projection shapes of p391 at 100-1000 rows, out=None and out=NaN-filled,
against F.linear and float64; and p391's forward's per-step error."""
import torch
import torch.nn.functional as F
from fullpipe.kernels import gemm, hopper_gemm as hg
torch.manual_seed(0)
s = torch.cuda.current_stream()
sms = torch.cuda.get_device_properties(0).multi_processor_count
for m in (100, 200, 300, 384, 500, 777, 1000):
    for n, k in ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
        ref = x.double() @ w.double().T
        y0 = gemm(x, w.T, variant="hopper", stream=s)
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        y1 = gemm(x, w.T, variant="hopper", stream=s, out=out)
        tl = F.linear(x, w)
        torch.cuda.synchronize()
        e = lambda y: ((y.double() - ref).norm() / ref.norm()).item()
        print(f"{m:5d} x {n:6d} x {k:6d} {hg.default_build(m, n, k, sms, True).label:28s} out=None {e(y0):.2e} "
              f"out=NaN {e(y1):.2e} F.linear {e(tl):.2e}", flush=True)
