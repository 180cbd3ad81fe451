"""p283: every candidate plan of small products, results checked (for compute-sanitizer); with --host, the host's
cost of a gemm(variant="hopper") call: untuned (the rule), tuned (a remembered plan), hopper_gemm.run direct."""
import sys, time
import torch
from fullpipe.kernels import gemm, gemm_tuning as gt, hopper_gemm as hg
from fullpipe.kernels._operands import operand

sms = torch.cuda.get_device_properties(0).multi_processor_count
bad = 0
for m, n, k, wt in ((40, 264, 1032, False), (200, 1032, 2056, True), (300, 520, 1544, False), (130, 136, 1000, True)):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).T if wt else torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    ref = a.double() @ b.double()
    A, B = operand(a, "a"), operand(b, "b", transposed_ok=True)
    for p in gt.candidates(m, n, k, sms):
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        gt.run_plan(p, A, B, out, torch.cuda.current_stream())
        torch.cuda.synchronize()
        err = float((out.double() - ref).norm() / ref.norm())
        ok = err < 1e-2
        bad += not ok
        print(f"{'ok  ' if ok else 'BAD '} {m}x{n}x{k}{' w.T' if wt else ''} {p.label:28s} rel err {err:.2e}", flush=True)
if "--host" in sys.argv:
    a = torch.randn(8, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(8, 4096, device="cuda", dtype=torch.bfloat16)
    s = torch.cuda.current_stream()

    def per_call(fn, n=3000):
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            fn()
        dt = (time.perf_counter() - t) / n * 1e6
        torch.cuda.synchronize()
        return dt
    A, B = operand(a, "a"), operand(w.T, "b", transposed_ok=True)
    for big in (False, True):
        if big:
            a = torch.randn(2048, 4096, device="cuda", dtype=torch.bfloat16)
            out = torch.empty(2048, 4096, device="cuda", dtype=torch.bfloat16)
            A = operand(a, "a")
        untuned = per_call(lambda: gemm(a, w.T, variant="hopper", stream=s, out=out), 300 if big else 3000)
        gt.tune_operands(A, B, s, save=False)
        tuned = per_call(lambda: gemm(a, w.T, variant="hopper", stream=s, out=out), 300 if big else 3000)
        print(f"host per call, {a.shape[0]} rows: untuned {untuned:.2f} us, tuned {tuned:.2f} us", flush=True)
sys.exit(1 if bad else 0)
