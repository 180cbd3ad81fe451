"""p333: heads of a vocabulary that is not a multiple of 8 (GPT-2's 50257, a 1001-class head), gemm(x, w.T,
variant="hopper") against torch.matmul on the same tensors: device time per call (CUDA events over 50 calls, after
warm-up), without out (the persistent rung returns a padded-row view) and into out (a 2-D copy after)."""
import torch
from fullpipe.kernels import gemm

dev = torch.device("cuda")


def t_us(fn, n=50):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        fn()
    b.record(); torch.cuda.synchronize()
    return a.elapsed_time(b) * 1e3 / n


s = torch.cuda.current_stream()
for n, k in ((50257, 768), (50264, 768), (1001, 2048)):
    w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
    for m in (1, 8, 200, 2048, 8192):
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        out = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
        ref = x.float() @ w.float().T
        y = gemm(x, w.T, variant="hopper", stream=s)
        err = ((y.float() - ref).norm() / ref.norm()).item()
        tt = t_us(lambda: torch.matmul(x, w.T))
        tf = t_us(lambda: gemm(x, w.T, variant="hopper", stream=s))
        to = t_us(lambda: gemm(x, w.T, variant="hopper", stream=s, out=out))
        print(f"RESULT n{n:6d} k{k:5d} m{m:5d} err {err:.1e} contiguous {y.is_contiguous()!s:5s} torch {tt:8.1f} us  "
              f"fullpipe {tf:8.1f} us ({tt / tf:.2f}x)  into out {to:8.1f} us ({tt / to:.2f}x)", flush=True)
