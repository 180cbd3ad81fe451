"""p412 (session 60): where a 3-D gemm(x, w.T, variant="hopper") call's host time goes (p411: 61 us against 23
for a 2-D one): each step alone, 3 alternating rounds of 2000 calls (median), no sync inside a round."""
import dataclasses, statistics, time, math
import numpy as np
import torch, torch.nn.functional as F
from fullpipe.kernels import gemm, hopper_gemm as hg
from fullpipe.kernels._operands import operand

st = torch.cuda.current_stream()
x3 = torch.randn(8, 197, 1024, device="cuda", dtype=torch.bfloat16)
x2 = x3.view(-1, 1024)
w = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
A2, B = operand(x2, "a"), operand(w.T, "b", transposed_ok=True)
steps = {
    "F.linear 3-D": lambda: F.linear(x3, w),
    "F.linear 2-D": lambda: F.linear(x2, w),
    "gemm 3-D": lambda: gemm(x3, w.T, variant="hopper", stream=st),
    "gemm 2-D (same rows)": lambda: gemm(x2, w.T, variant="hopper", stream=st),
    "gemm 3-D, stream=current_stream()": lambda: gemm(x3, w.T, variant="hopper", stream=torch.cuda.current_stream()),
    "torch.cuda.current_stream()": lambda: torch.cuda.current_stream(),
    "st.__cuda_stream__()": lambda: st.__cuda_stream__(),
    "hg.run on parsed operands": lambda: hg.run(A2, B, "persistent", None, st),
    "operand(x3)": lambda: operand(x3, "a"),
    "operand(w.T)": lambda: operand(w.T, "b", transposed_ok=True),
    "w.T": lambda: w.T,
    "np.prod(rows)": lambda: int(np.prod((8, 197))),
    "math.prod(rows)": lambda: math.prod((8, 197)),
    "dataclasses.replace(A)": lambda: dataclasses.replace(A2, shape=(1576, 1024)),
    "out.reshape(8, 197, N)": lambda: x2.reshape(8, 197, 1024),
    "torch.empty(1576, 1024)": lambda: torch.empty(1576, 1024, dtype=torch.bfloat16, device="cuda"),
}
times = {k: [] for k in steps}
for _ in range(3):
    for name, fn in steps.items():
        for _ in range(100):
            fn()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(2000):
            fn()
        times[name].append((time.perf_counter() - t) / 2000 * 1e6)
        torch.cuda.synchronize()
for name, v in times.items():
    print(f"{name:36s} {statistics.median(v):7.2f} us  ({', '.join(f'{x:.1f}' for x in v)})")
print("stream has __cuda_stream__:", hasattr(st, "__cuda_stream__"), type(st))
