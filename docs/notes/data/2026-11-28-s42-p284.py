"""p284: the host's cost a gemm(variant="hopper") call for 2048 x 4096 x 4096 (w.T), untuned and tuned, at several
call counts (is the tuned reading of p283 the host or a full launch queue?)."""
import time
import torch
from fullpipe.kernels import gemm, gemm_tuning as gt
from fullpipe.kernels._operands import operand

s = torch.cuda.current_stream()
w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
for rows in (8, 2048):
    a = torch.randn(rows, 4096, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(rows, 4096, device="cuda", dtype=torch.bfloat16)
    f = lambda: gemm(a, w.T, variant="hopper", stream=s, out=out)

    def per_call(n):
        for _ in range(20):
            f()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            f()
        host = (time.perf_counter() - t) / n * 1e6
        torch.cuda.synchronize()
        return host, (time.perf_counter() - t) / n * 1e6
    gt.forget()
    un = [per_call(n) for n in (50, 300, 1000)]
    plan = gt.tune_operands(operand(a, "a"), operand(w.T, "b", transposed_ok=True), s, save=False)
    tu = [per_call(n) for n in (50, 300, 1000)]
    print(f"{rows} rows, rule {gt.rule_plan(rows, 4096, 4096, 132).label}, tuned {plan.label}")
    for n, u, t in zip((50, 300, 1000), un, tu):
        print(f"  {n:5d} calls: untuned host {u[0]:6.2f} us (with GPU {u[1]:6.2f}), tuned host {t[0]:6.2f} (with GPU {t[1]:6.2f})")
