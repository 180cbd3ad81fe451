"""p321: where gemm(variant="hopper")'s host time goes per call (p320: 28-90 us a call against torch.matmul's 14-27).
One small product (16 x 768 x 768, b = w.T, bf16; the kernel ~5 us, so the queue never fills): per-call wall of
20000 calls each way, the pieces timed alone, and cProfile of 5000 calls."""
import cProfile, pstats, statistics, time
import torch
import torch.nn.functional as F
from fullpipe.kernels import gemm, gemm_tuning as gt, hopper_gemm as hg, skinny_gemm as sg
from fullpipe.kernels._operands import operand, matmul_shape
from fullpipe.kernels.gemm import _gemm_hopper_family

m, k, n = int(__import__("os").environ.get("P321_M", 16)), 768, 768
x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
wt = w.T
out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
cs = torch.cuda.current_stream()


def per_call(fn, n=20000):
    fn(); torch.cuda.synchronize()
    best = []
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(n // 3):
            fn()
        best.append((time.perf_counter() - t) / (n // 3) * 1e6)
        torch.cuda.synchronize()
    return min(best)


rows = {
    "torch.matmul(x, w.T, out=)": lambda: torch.matmul(x, wt, out=out),
    "F.linear(x, w)": lambda: F.linear(x, w),
    "torch.cuda.current_stream()": lambda: torch.cuda.current_stream(),
    "gemm(out=, stream=current_stream())": lambda: gemm(x, wt, variant="hopper", stream=torch.cuda.current_stream(), out=out),
    "gemm(out=, stream=cs)": lambda: gemm(x, wt, variant="hopper", stream=cs, out=out),
    "gemm(stream=cs) out=None": lambda: gemm(x, wt, variant="hopper", stream=cs),
    "hg.gemm_hopper(out=) (no stream)": lambda: hg.gemm_hopper(x, wt, out=out),
    "hg.gemm_hopper() out=None (no stream)": lambda: hg.gemm_hopper(x, wt),
    "gemm(stream=None?)": lambda: gemm(x, wt, variant="hopper", stream=cs),
}
A, B = operand(x, "a"), operand(wt, "b", transposed_ok=True)
C = operand(out, "out")
launch = next(iter(hg._LAUNCHES.values())) if hg._LAUNCHES else None
for nm, fn in rows.items():
    print(f"{nm:40} {per_call(fn):7.2f} us", flush=True)
launch = [l for key, l in hg._LAUNCHES.items() if key[8] == A.ptr and key[11] == C.ptr][0]
pieces = {
    "operand(x)": lambda: operand(x, "a"),
    "operand(w.T, transposed_ok)": lambda: operand(wt, "b", transposed_ok=True),
    "matmul_shape": lambda: matmul_shape(A, B),
    "gt.lookup": lambda: gt.lookup(A, B, m, n, k),
    "sg.preferred": lambda: sg.preferred(m, n, k, 132),
    "hg.arch_and_sm_count": lambda: hg.arch_and_sm_count(0),
    "hg.prepare_output(out=)": lambda: hg.prepare_output(A, B, out, cs),
    "hg._stream_handle(cs)": lambda: hg._stream_handle(cs, A),
    "launch.enqueue()": lambda: launch.enqueue(),
    "torch.empty(m, n)": lambda: torch.empty(m, n, device="cuda", dtype=torch.bfloat16),
}
for nm, fn in pieces.items():
    try:
        print(f"  {nm:38} {per_call(fn, 6000):7.2f} us", flush=True)
    except Exception as e:
        print(f"  {nm:38} {type(e).__name__}: {e}")
raise SystemExit(0)
pr = cProfile.Profile()
fn = rows["gemm(out=, stream=current_stream())"]
pr.enable()
for _ in range(5000):
    fn()
pr.disable()
torch.cuda.synchronize()
pstats.Stats(pr).sort_stats("tottime").print_stats(22)
