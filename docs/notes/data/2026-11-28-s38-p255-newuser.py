#!/usr/bin/env python3
"""p255: fullpipe as a demanding NEW user tries it, on workloads, shapes and inputs the tests do
not hold. Every scenario is isolated (its own try/except; a watchdog ends the process if one
hangs) and prints one line:

    SCENARIO name | OK/WRONG/ERROR/SLOW | detail [seconds] [warnings]

OK also covers a clear ValueError/TypeError for input that is genuinely invalid ("clear error:
..."; the message is printed so a human can judge it). WRONG: a wrong result, or bad input taken
silently. ERROR: an unexpected exception. SLOW: right, but slower than the bound named in the line.
A summary table ends the run; the text of `print(pipe.stats)` follows it.

    python3 2026-11-28-s38-p255-newuser.py                # everything, one process (~2-4 min, H200)
    python3 2026-11-28-s38-p255-newuser.py --list         # the scenario names
    python3 2026-11-28-s38-p255-newuser.py --only gemm_   # names containing gemm_
    python3 2026-11-28-s38-p255-newuser.py --isolate      # each scenario in a process of its own
                                                          # (slower; for when one poisons the context)
Needs an sm_90a GPU, PyTorch, torchvision, CuPy; fullpipe importable (PYTHONPATH=src).
"""
from __future__ import annotations

import argparse
import faulthandler
import gc
import math
import os
import subprocess
import sys
import threading
import time
import traceback
import warnings

import numpy as np

SEED = 0
SCENARIOS: list[tuple[str, object, int]] = []  # (name, fn, watchdog seconds)
STATS_TEXT: list[str] = []


def scenario(name: str, timeout: int = 120):
    def deco(fn):
        SCENARIOS.append((name, fn, timeout))
        return fn
    return deco


# ----------------------------------------------------------------------------- helpers
def one_line(s: object, n: int = 200) -> str:
    return " ".join(str(s).split())[:n]


def fmt_exc(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    where = f" (at {os.path.basename(tb[-1].filename)}:{tb[-1].lineno})" if tb else ""
    notes = getattr(e, "__notes__", None)
    note = f" [note: {one_line(notes[0], 120)}]" if notes else ""
    return f"{type(e).__name__}: {one_line(e)}{where}{note}"


def sync():
    import torch
    torch.cuda.synchronize()


def to_f32(x, device="cuda"):
    """A float32 torch tensor on ``device`` from torch / NumPy / CuPy."""
    import torch
    if isinstance(x, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(x)).to(device).float()
    if type(x).__module__.startswith("cupy"):
        import cupy
        return torch.from_numpy(cupy.asnumpy(x)).to(device).float()
    return x.detach().to(device).float()


def rel_err(got, ref) -> float:
    """max|got - ref| / max|ref| (inf on a shape mismatch's caller, NaN or inf in got)."""
    g, r = to_f32(got), to_f32(ref)
    if tuple(g.shape) != tuple(r.shape):
        raise AssertionError(f"shape {tuple(g.shape)} != reference {tuple(r.shape)}")
    if not bool(torch_isfinite_all(g)):
        return math.inf
    den = float(r.abs().max()) if r.numel() else 0.0
    num = float((g - r).abs().max()) if r.numel() else 0.0
    return num / den if den > 0 else num


def torch_isfinite_all(t):
    import torch
    return torch.isfinite(t).all()


def verdict(rel: float, tol: float, extra: str = "") -> tuple[str, str]:
    st = "OK" if rel < tol else "WRONG"
    return st, f"max rel err {rel:.2e} (tol {tol:g}){'; ' + extra if extra else ''}"


def expect_error(fn, on_success=None, types=(ValueError, TypeError)):
    """Run ``fn``: a ValueError/TypeError is OK ("clear error", message printed for a human to
    judge); other exceptions propagate (ERROR); success goes to ``on_success(result)`` (which may
    judge a correct result OK), else it is WRONG (bad input taken silently)."""
    try:
        r = fn()
    except types as e:
        return "OK", f"clear error: {type(e).__name__}: {one_line(e)}"
    sync()
    if on_success is None:
        return "WRONG", f"accepted without an error (returned {describe(r)})"
    return on_success(r)


def describe(r) -> str:
    shape = getattr(r, "shape", None)
    return f"{type(r).__name__} {tuple(shape) if shape is not None else ''} {getattr(r, 'dtype', '')}".strip()


def bench_pair(fa, fb, iters=20, rounds=3) -> tuple[float, float]:
    """Median-free: min over interleaved rounds of the mean time per call (s) of fa and fb."""
    ta, tb = [], []
    fa(); fb(); sync()
    for r in range(rounds):
        for which in ((0, 1) if r % 2 == 0 else (1, 0)):
            f = fa if which == 0 else fb
            sync(); t0 = time.perf_counter()
            for _ in range(iters):
                f()
            sync()
            (ta if which == 0 else tb).append((time.perf_counter() - t0) / iters)
    return min(ta), min(tb)


def timed(fn):
    sync(); t0 = time.perf_counter(); r = fn(); sync()
    return r, time.perf_counter() - t0


# ============================================================================ CLI
def _cli(args: list[str], timeout: int) -> tuple[int, str, float]:
    import fullpipe as fp
    env = dict(os.environ)
    src = os.path.dirname(os.path.dirname(os.path.abspath(fp.__file__)))
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "fullpipe", *args], capture_output=True, text=True, timeout=timeout,
                       env=env)
    lines = [ln for ln in (p.stdout + "\n" + p.stderr).splitlines() if ln.strip()]
    return p.returncode, (lines[-1] if lines else ""), time.perf_counter() - t0


@scenario("cli_compile_sm90a", timeout=200)
def cli_compile():
    # first: it also fills the cubin cache the in-process kernels read
    try:
        rc, last, dt = _cli(["compile", "--arch", "sm_90a"], timeout=180)
    except subprocess.TimeoutExpired:
        return "SLOW", "did not finish in 180 s (skipped)"
    return ("OK" if rc == 0 else "ERROR"), f"rc {rc} in {dt:.1f} s; last line: {one_line(last, 150)}"


@scenario("cli_info", timeout=150)
def cli_info():
    rc, last, dt = _cli(["info"], timeout=120)
    return ("OK" if rc == 0 else "ERROR"), f"rc {rc} in {dt:.1f} s; last line: {one_line(last, 150)}"


@scenario("cli_bench_nosuch", timeout=150)
def cli_bench_nosuch():
    rc, last, dt = _cli(["bench", "nosuch"], timeout=120)
    ok = rc == 2 and "nosuch" in last
    return ("OK" if ok else "WRONG"), f"rc {rc} (expect 2) in {dt:.1f} s; last line: {one_line(last, 160)}"


# ============================================================================ GEMM (Hopper)
def _ab(m, n, k, dtype, seed, b_transposed=False):
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", generator=g).to(dtype)
    if b_transposed:
        w = torch.randn(n, k, device="cuda", generator=g).to(dtype)  # nn.Linear's (out, in)
        return a, w.T, w
    return a, torch.randn(k, n, device="cuda", generator=g).to(dtype), None


def _gemm_check(m, n, k, dtype_name, variant="hopper", b_transposed=False, tol=1e-2):
    """The product into a new output (first call: compile + plan) and into a NaN-poisoned
    ``out`` (every element written), both against torch.matmul in fp32."""
    import torch
    from fullpipe.kernels import gemm
    dtype = getattr(torch, dtype_name)
    a, b, _ = _ab(m, n, k, dtype, seed=m * 131 + n * 7 + k, b_transposed=b_transposed)
    ref = a.float() @ b.float()
    s = torch.cuda.current_stream()
    c, t_first = timed(lambda: gemm(a, b, variant=variant, stream=s))
    if c.dtype != dtype or tuple(c.shape) != (m, n):
        return "WRONG", f"output {describe(c)}, expected ({m}, {n}) {dtype}"
    out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    ret = gemm(a, b, variant=variant, stream=s, out=out)
    sync()
    rel = max(rel_err(c, ref), rel_err(out, ref))
    same = ret is out
    st, d = verdict(rel, tol, f"{dtype_name}, first call {t_first * 1e3:.1f} ms (compile+plan)"
                    + ("" if same else "; out= not returned"))
    return (st if same else "WRONG"), d


@scenario("gemm_M1_bf16_1x2040x1000")
def gemm_m1():
    return _gemm_check(1, 2040, 1000, "bfloat16")


@scenario("gemm_M7_fp16_7x1000x744")
def gemm_m7():
    return _gemm_check(7, 1000, 744, "float16")


@scenario("gemm_M129_bf16_129x3000x520")
def gemm_m129():
    return _gemm_check(129, 3000, 520, "bfloat16")


@scenario("gemm_M1000_fp16_1000x1000x744")
def gemm_m1000():
    return _gemm_check(1000, 1000, 744, "float16")


@scenario("gemm_M3000_bf16_3000x1016x2056")
def gemm_m3000():
    return _gemm_check(3000, 1016, 2056, "bfloat16")


@scenario("gemm_longK_bf16_1024x1024x12288")
def gemm_longk():
    # the uncommitted default_build rule (long K -> 128 x 128 tiles with stream-K)
    return _gemm_check(1024, 1024, 12288, "bfloat16")


@scenario("gemm_longK_wT_fp16_896x896x16384")
def gemm_longk_wt():
    return _gemm_check(896, 896, 16384, "float16", b_transposed=True)


@scenario("gemm_K100_not_mult8")
def gemm_k100():
    import torch
    from fullpipe.kernels import gemm
    a, b, _ = _ab(64, 128, 100, torch.bfloat16, 1)
    ref = a.float() @ b.float()
    return expect_error(lambda: gemm(a, b, variant="hopper", stream=torch.cuda.current_stream()),
                        on_success=lambda c: verdict(rel_err(c, ref), 1e-2, "accepted K=100"))


@scenario("gemm_N1001_not_mult8")
def gemm_n1001():
    import torch
    from fullpipe.kernels import gemm
    a, b, _ = _ab(64, 1001, 128, torch.float16, 2)
    ref = a.float() @ b.float()
    return expect_error(lambda: gemm(a, b, variant="hopper", stream=torch.cuda.current_stream()),
                        on_success=lambda c: verdict(rel_err(c, ref), 1e-2, "accepted N=1001"))


@scenario("gemm_cupy_fp16_1000x1000x744")
def gemm_cupy():
    import cupy
    from fullpipe.kernels import gemm
    from fullpipe.kernels.hopper_gemm import gemm_hopper
    rng = np.random.default_rng(3)
    a = cupy.asarray(rng.standard_normal((1000, 744)).astype(np.float16))
    b = cupy.asarray(rng.standard_normal((744, 1000)).astype(np.float16))
    ref = cupy.asnumpy(a.astype(np.float32) @ b.astype(np.float32))
    cs = cupy.cuda.get_current_stream()
    try:
        c = gemm(a, b, variant="hopper", stream=cs)   # a CuPy user passes CuPy's stream
        cs.synchronize()
    except TypeError as e:
        c = gemm_hopper(a, b)                          # (the function that defaults to CuPy's stream)
        cs.synchronize()
        rel = rel_err(c, ref)
        return "ERROR", (f"gemm(stream=cupy stream) refused: {one_line(e, 150)}; gemm_hopper(stream=None) "
                         f"max rel err {rel:.2e}")
    if not type(c).__module__.startswith("cupy") or c.dtype != np.float16:
        return "WRONG", f"output is {type(c).__module__}.{type(c).__name__} {c.dtype}, expected a cupy float16 array"
    return verdict(rel_err(c, ref), 1e-2, "cupy in, cupy out, stream=cupy current stream")


@scenario("gemm_out_given_correct")
def gemm_out_ok():
    import torch
    from fullpipe.kernels import gemm
    a, b, _ = _ab(300, 520, 264, torch.bfloat16, 4)
    out = torch.full((300, 520), float("nan"), device="cuda", dtype=torch.bfloat16)
    ret = gemm(a, b, variant="hopper", stream=torch.cuda.current_stream(), out=out)
    sync()
    st, d = verdict(rel_err(out, a.float() @ b.float()), 1e-2)
    return (st if ret is out else "WRONG"), d + ("" if ret is out else "; the returned object is not out")


@scenario("gemm_out_wrong_dtype_fp32")
def gemm_out_dtype():
    import torch
    from fullpipe.kernels import gemm
    a, b, _ = _ab(128, 256, 64, torch.bfloat16, 5)
    out = torch.empty(128, 256, device="cuda", dtype=torch.float32)  # as the fp32/wmma variants write
    ref = a.float() @ b.float()
    return expect_error(lambda: gemm(a, b, variant="hopper", stream=torch.cuda.current_stream(), out=out),
                        on_success=lambda c: verdict(rel_err(out, ref), 1e-2, "fp32 out accepted"))


@scenario("gemm_out_wrong_shape")
def gemm_out_shape():
    import torch
    from fullpipe.kernels import gemm
    a, b, _ = _ab(128, 256, 64, torch.bfloat16, 6)
    out = torch.empty(128, 264, device="cuda", dtype=torch.bfloat16)
    return expect_error(lambda: gemm(a, b, variant="hopper", stream=torch.cuda.current_stream(), out=out))


@scenario("gemm_out_noncontiguous")
def gemm_out_noncontig():
    import torch
    from fullpipe.kernels import gemm
    a, b, _ = _ab(128, 256, 64, torch.bfloat16, 7)
    out = torch.full((256, 128), float("nan"), device="cuda", dtype=torch.bfloat16).T  # (128, 256), column-major
    ref = a.float() @ b.float()
    return expect_error(lambda: gemm(a, b, variant="hopper", stream=torch.cuda.current_stream(), out=out),
                        on_success=lambda c: verdict(rel_err(out, ref), 1e-2, "non-contiguous out accepted"))


@scenario("gemm_a_row_strided_slice")
def gemm_a_strided():
    import torch
    from fullpipe.kernels import gemm
    big = torch.randn(500, 264 + 64, device="cuda").to(torch.bfloat16)
    a = big[:, :264]                                  # rows 328 elements apart: a view with a row stride
    b = torch.randn(264, 392, device="cuda").to(torch.bfloat16)
    ref = a.float() @ b.float()
    return expect_error(lambda: gemm(a, b, variant="hopper", stream=torch.cuda.current_stream()),
                        on_success=lambda c: verdict(rel_err(c, ref), 1e-2, "strided a accepted"))


@scenario("gemm_a_misaligned_view")
def gemm_a_misaligned():
    import torch
    from fullpipe.kernels import gemm
    flat = torch.randn(200 * 136 + 1, device="cuda").to(torch.float16)
    a = flat[1:].view(200, 136)                       # contiguous, 2 bytes past an aligned address
    b = torch.randn(136, 264, device="cuda").to(torch.float16)
    ref = a.float() @ b.float()
    return expect_error(lambda: gemm(a, b, variant="hopper", stream=torch.cuda.current_stream()),
                        on_success=lambda c: verdict(rel_err(c, ref), 1e-2, "misaligned a accepted"))


@scenario("gemm_nn_linear_weight_T_333x1000->3000")
def gemm_linear():
    # the README's `gemm(x, lin.weight.T, variant="hopper", stream=s)` with a real nn.Linear (a Parameter
    # that requires grad), odd rows
    import torch
    from fullpipe.kernels import gemm
    torch.manual_seed(SEED)
    lin = torch.nn.Linear(1000, 3000, bias=False).cuda().to(torch.bfloat16)
    x = torch.randn(333, 1000, device="cuda").to(torch.bfloat16)
    y = gemm(x, lin.weight.T, variant="hopper", stream=torch.cuda.current_stream())
    sync()
    with torch.no_grad():
        ref = x.float() @ lin.weight.float().T
        ref_lin = lin(x)
    st, d = verdict(rel_err(y, ref), 1e-2)
    return st, d + f"; vs lin(x) in bf16 {rel_err(y, ref_lin):.2e}"


@scenario("gemm_skinny_wT_M5_5x1544x1032")
def gemm_skinny_wt():
    return _gemm_check(5, 1544, 1032, "bfloat16", variant="hopper_skinny", b_transposed=True)


@scenario("gemm_persistent_forced_M1_wT")
def gemm_persistent_m1():
    return _gemm_check(1, 776, 2056, "float16", variant="hopper_persistent", b_transposed=True)


@scenario("gemm_skinny_M129_too_many_rows")
def gemm_skinny_129():
    import torch
    from fullpipe.kernels import gemm
    a, b, _ = _ab(129, 256, 128, torch.bfloat16, 8)
    ref = a.float() @ b.float()
    return expect_error(lambda: gemm(a, b, variant="hopper_skinny", stream=torch.cuda.current_stream()),
                        on_success=lambda c: verdict(rel_err(c, ref), 1e-2, "129 rows accepted"))


@scenario("gemm_3d_input")
def gemm_3d():
    import torch
    from fullpipe.kernels import gemm
    a = torch.randn(4, 64, 128, device="cuda").to(torch.bfloat16)
    b = torch.randn(128, 256, device="cuda").to(torch.bfloat16)
    ref = (a.float() @ b.float())
    return expect_error(lambda: gemm(a, b, variant="hopper", stream=torch.cuda.current_stream()),
                        on_success=lambda c: verdict(rel_err(c, ref), 1e-2, "3-D a accepted (batched?)"))


@scenario("gemm_fp32_inputs")
def gemm_fp32():
    import torch
    from fullpipe.kernels import gemm
    a, b = torch.randn(128, 128, device="cuda"), torch.randn(128, 128, device="cuda")
    return expect_error(lambda: gemm(a, b, variant="hopper", stream=torch.cuda.current_stream()))


@scenario("gemm_cpu_inputs")
def gemm_cpu():
    import torch
    from fullpipe.kernels import gemm
    a = torch.randn(128, 128).to(torch.bfloat16)
    b = torch.randn(128, 128).to(torch.bfloat16)
    return expect_error(lambda: gemm(a, b, variant="hopper", stream=torch.cuda.current_stream()))


@scenario("gemm_mixed_bf16_fp16")
def gemm_mixed():
    import torch
    from fullpipe.kernels import gemm
    a = torch.randn(128, 128, device="cuda").to(torch.bfloat16)
    b = torch.randn(128, 128, device="cuda").to(torch.float16)
    return expect_error(lambda: gemm(a, b, variant="hopper", stream=torch.cuda.current_stream()))


@scenario("gemm_zero_size_M0_and_K0")
def gemm_zero():
    # torch.matmul gives a (0, N) result for M = 0 and zeros for K = 0; what does fullpipe do?
    import torch
    from fullpipe.kernels import gemm
    s = torch.cuda.current_stream()
    parts, statuses = [], []
    for label, (m, n, k) in (("M=0", (0, 256, 128)), ("K=0", (64, 256, 0))):
        a = torch.empty(m, k, device="cuda", dtype=torch.bfloat16).normal_()
        b = torch.empty(k, n, device="cuda", dtype=torch.bfloat16).normal_()
        ref = a.float() @ b.float()

        def ok_if_right(c, ref=ref):
            good = tuple(c.shape) == tuple(ref.shape) and bool((c.float() == ref).all())
            return ("OK" if good else "WRONG"), f"returned {describe(c)}{'' if good else ' != torch.matmul'}"
        st, d = expect_error(lambda: gemm(a, b, variant="hopper", stream=s), on_success=ok_if_right)
        statuses.append(st)
        parts.append(f"{label}: {d[:150]}")
    return ("OK" if all(x == "OK" for x in statuses) else "WRONG"), " || ".join(parts)


@scenario("gemm_stream_torch_side_stream_streamK")
def gemm_side_stream():
    import torch
    from fullpipe.kernels import gemm
    a, b, _ = _ab(512, 512, 4096, torch.bfloat16, 9)   # stream-K: a workspace on the side stream
    ref = a.float() @ b.float()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    c = gemm(a, b, variant="hopper", stream=s)
    c.record_stream(s)
    s.synchronize()
    return verdict(rel_err(c, ref), 1e-2, "stream=torch.cuda.Stream()")


@scenario("gemm_stream_current_stream_loop")
def gemm_current_stream():
    # a loop of fresh products of three shapes: the caching allocator hands the same addresses back,
    # so fullpipe's launch cache (keyed by addresses) hits with new data every time
    import torch
    from fullpipe.kernels import gemm
    shapes = [(257, 1032, 520), (64, 4096, 1024), (1500, 776, 2048)]
    worst = 0.0
    for i in range(30):
        m, n, k = shapes[i % 3]
        a, b, _ = _ab(m, n, k, torch.float16 if i % 2 else torch.bfloat16, seed=1000 + i)
        c = gemm(a, b, variant="hopper", stream=torch.cuda.current_stream())
        worst = max(worst, rel_err(c, a.float() @ b.float()))
        del a, b, c
    return verdict(worst, 1e-2, "30 products, stream=torch.cuda.current_stream()")


@scenario("gemm_stream_missing_or_int_handle")
def gemm_stream_bad():
    import torch
    from fullpipe.kernels import gemm
    a, b, _ = _ab(128, 128, 128, torch.bfloat16, 10)
    parts, sts = [], []
    for label, kw in (("stream=None", {}), ("stream=int handle", {"stream": torch.cuda.current_stream().cuda_stream})):
        st, d = expect_error(lambda kw=kw: gemm(a, b, variant="hopper", **kw),
                             on_success=lambda c: verdict(rel_err(c, a.float() @ b.float()), 1e-2, "accepted"))
        sts.append(st)
        parts.append(f"{label}: {d[:160]}")
    return ("OK" if all(x == "OK" for x in sts) else "WRONG"), " || ".join(parts)


@scenario("gemm_perf_4096cubed_bf16_vs_cublas", timeout=150)
def gemm_perf_square():
    import torch
    from fullpipe.kernels import gemm
    a, b, _ = _ab(4096, 4096, 4096, torch.bfloat16, 11)
    c1 = torch.empty(4096, 4096, device="cuda", dtype=torch.bfloat16)
    c2 = torch.empty_like(c1)
    s = torch.cuda.current_stream()
    t_fp, t_cb = bench_pair(lambda: gemm(a, b, variant="hopper", stream=s, out=c1),
                            lambda: torch.matmul(a, b, out=c2), iters=20, rounds=3)
    rel = rel_err(c1, c2)
    ratio = t_cb / t_fp
    tf = 2 * 4096 ** 3 / t_fp / 1e12
    st = "WRONG" if rel >= 1e-2 else ("SLOW" if ratio < 0.85 else "OK")
    return st, f"{t_fp * 1e6:.0f} us ({tf:.0f} TFLOP/s) vs cuBLAS {t_cb * 1e6:.0f} us: {ratio:.2f}x cuBLAS (SLOW < 0.85); rel vs cuBLAS {rel:.1e}"


@scenario("gemm_perf_decode_8x4096_wT_28672", timeout=150)
def gemm_perf_decode():
    import torch
    from fullpipe.kernels import gemm
    x, wT, w = _ab(8, 28672, 4096, torch.bfloat16, 12, b_transposed=True)
    o1 = torch.empty(8, 28672, device="cuda", dtype=torch.bfloat16)
    o2 = torch.empty_like(o1)
    s = torch.cuda.current_stream()
    t_fp, t_cb = bench_pair(lambda: gemm(x, wT, variant="hopper", stream=s, out=o1),
                            lambda: torch.matmul(x, wT, out=o2), iters=50, rounds=3)
    rel = rel_err(o1, x.float() @ wT.float())
    ratio = t_cb / t_fp
    gbps = w.numel() * 2 / t_fp / 1e9
    st = "WRONG" if rel >= 1e-2 else ("SLOW" if ratio < 0.8 else "OK")
    return st, (f"{t_fp * 1e6:.1f} us/call ({gbps:.0f} GB/s of weights) vs cuBLAS {t_cb * 1e6:.1f}: {ratio:.2f}x "
                f"(SLOW < 0.8; host-enqueued back to back); rel {rel:.1e}")


# ============================================================================ attention
def _qkv(b, s, hq, hkv, d, dtype, seed):
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(b, s, hq, d, device="cuda", generator=g).to(dtype)
    k = torch.randn(b, s, hkv, d, device="cuda", generator=g).to(dtype)
    v = torch.randn(b, s, hkv, d, device="cuda", generator=g).to(dtype)
    return q, k, v


def _attn_ref(q, k, v, causal, scale=None):
    """fp32 SDPA on [B, S, H, D] (or packed [S, H, D]) inputs, K/V heads repeated for GQA."""
    import torch.nn.functional as F
    rep = q.shape[-2] // k.shape[-2]
    qf = q.float().transpose(-3, -2)
    kf = k.float().repeat_interleave(rep, dim=-2).transpose(-3, -2)
    vf = v.float().repeat_interleave(rep, dim=-2).transpose(-3, -2)
    return F.scaled_dot_product_attention(qf, kf, vf, is_causal=causal, scale=scale).transpose(-3, -2)


def _attn_check(b, s, hq, hkv, d, dtype_name, backend="auto", tol=1e-2):
    import torch
    from fullpipe.kernels import attention
    dtype = getattr(torch, dtype_name)
    q, k, v = _qkv(b, s, hq, hkv, d, dtype, seed=b * 1000 + s + hq + d)
    parts, worst = [], 0.0
    for causal in (False, True):
        o, t = timed(lambda: attention(q, k, v, causal=causal, backend=backend))
        if tuple(o.shape) != tuple(q.shape) or o.dtype != dtype:
            return "WRONG", f"causal={causal}: output {describe(o)}, expected q's {tuple(q.shape)} {dtype}"
        rel = rel_err(o, _attn_ref(q, k, v, causal))
        worst = max(worst, rel)
        parts.append(f"causal={causal} {rel:.1e} ({t * 1e3:.1f} ms first)")
    return verdict(worst, tol, f"{dtype_name} GQA {hq}:{hkv}; " + ", ".join(parts))


@scenario("attn_seq1_B3_H8_d64")
def attn_s1():
    return _attn_check(3, 1, 8, 8, 64, "bfloat16")


@scenario("attn_seq17_B3_d128_gqa8:2_fp16")
def attn_s17():
    return _attn_check(3, 17, 8, 2, 128, "float16")


@scenario("attn_seq1000_B3_d64_gqa16:4_bf16")
def attn_s1000():
    return _attn_check(3, 1000, 16, 4, 64, "bfloat16")


@scenario("attn_seq4097_B1_d128_mqa8:1_fp16")
def attn_s4097():
    return _attn_check(1, 4097, 8, 1, 128, "float16")


@scenario("attn_seq777_B2_d128_gqa12:4_mma_sync_forced")
def attn_mma():
    return _attn_check(2, 777, 12, 4, 128, "bfloat16", backend="mma_sync")


@scenario("attn_seq777_B2_d64_gqa12:3_hopper_forced")
def attn_hopper_forced():
    return _attn_check(2, 777, 12, 3, 64, "float16", backend="hopper")


@scenario("attn_headdim_80")
def attn_d80():
    import torch
    from fullpipe.kernels import attention
    q, k, v = _qkv(1, 64, 4, 4, 80, torch.bfloat16, 1)
    return expect_error(lambda: attention(q, k, v),
                        on_success=lambda o: verdict(rel_err(o, _attn_ref(q, k, v, False)), 1e-2, "d80 accepted"))


@scenario("attn_headdim_256")
def attn_d256():
    import torch
    from fullpipe.kernels import attention
    q, k, v = _qkv(1, 64, 4, 4, 256, torch.bfloat16, 2)
    return expect_error(lambda: attention(q, k, v, causal=True),
                        on_success=lambda o: verdict(rel_err(o, _attn_ref(q, k, v, True)), 1e-2, "d256 accepted"))


@scenario("attn_varlen_5seqs_1..2049_d128_gqa8:2_no_max_seqlen")
def attn_varlen():
    import torch
    from fullpipe.kernels import attention
    lens = [1, 17, 1000, 513, 2049]
    cu = torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=torch.int32, device="cuda")
    T = sum(lens)
    g = torch.Generator(device="cuda").manual_seed(21)
    q = torch.randn(T, 8, 128, device="cuda", generator=g).to(torch.bfloat16)
    k = torch.randn(T, 2, 128, device="cuda", generator=g).to(torch.bfloat16)
    v = torch.randn(T, 2, 128, device="cuda", generator=g).to(torch.bfloat16)
    worst, parts = 0.0, []
    for causal in (False, True):
        o = attention(q, k, v, causal=causal, cu_seqlens=cu)
        sync()
        w = 0.0
        for i, n in enumerate(lens):
            sl = slice(int(cu[i]), int(cu[i + 1]))
            w = max(w, rel_err(o[sl], _attn_ref(q[sl], k[sl], v[sl], causal)))
        worst = max(worst, w)
        parts.append(f"causal={causal} {w:.1e}")
    return verdict(worst, 1e-2, "per sequence; " + ", ".join(parts))


@scenario("attn_sdpa_layout_transposed_view")
def attn_sdpa_layout():
    # a user coming from SDPA makes [B, H, S, D] tensors and hands over .transpose(1, 2) views
    import torch
    from fullpipe.kernels import attention
    g = torch.Generator(device="cuda").manual_seed(5)
    qh, kh, vh = (torch.randn(2, 8, 300, 64, device="cuda", generator=g).to(torch.float16) for _ in range(3))
    q, k, v = (t.transpose(1, 2) for t in (qh, kh, vh))
    return expect_error(lambda: attention(q, k, v, causal=True),
                        on_success=lambda o: verdict(rel_err(o, _attn_ref(q, k, v, True)), 1e-2, "strided views accepted"))


@scenario("attn_fp32_inputs")
def attn_fp32():
    import torch
    from fullpipe.kernels import attention
    q, k, v = _qkv(1, 64, 4, 4, 64, torch.float32, 3)
    return expect_error(lambda: attention(q, k, v))


@scenario("attn_cross_attention_Sq!=Sk")
def attn_cross():
    import torch
    from fullpipe.kernels import attention
    q = torch.randn(1, 128, 8, 64, device="cuda").to(torch.bfloat16)
    k = torch.randn(1, 256, 8, 64, device="cuda").to(torch.bfloat16)
    return expect_error(lambda: attention(q, k, k.clone()))


@scenario("attn_gqa_bad_ratio_6:4")
def attn_bad_gqa():
    import torch
    from fullpipe.kernels import attention
    q = torch.randn(1, 64, 6, 64, device="cuda").to(torch.bfloat16)
    k = torch.randn(1, 64, 4, 64, device="cuda").to(torch.bfloat16)
    return expect_error(lambda: attention(q, k, k.clone()))


@scenario("attn_cu_seqlens_int64_or_cpu")
def attn_bad_cu():
    import torch
    from fullpipe.kernels import attention
    q = torch.randn(100, 4, 64, device="cuda").to(torch.bfloat16)
    k = torch.randn(100, 4, 64, device="cuda").to(torch.bfloat16)
    parts, sts = [], []
    for label, cu in (("int64", torch.tensor([0, 30, 100], device="cuda")),
                      ("cpu int32", torch.tensor([0, 30, 100], dtype=torch.int32))):
        st, d = expect_error(lambda cu=cu: attention(q, k, k.clone(), cu_seqlens=cu))
        sts.append(st)
        parts.append(f"{label}: {d[:160]}")
    return ("OK" if all(x == "OK" for x in sts) else "WRONG"), " || ".join(parts)


@scenario("attn_perf_causal_B2_S4096_H16_d128_vs_sdpa", timeout=150)
def attn_perf():
    import torch
    import torch.nn.functional as F
    from fullpipe.kernels import attention
    q, k, v = _qkv(2, 4096, 16, 16, 128, torch.bfloat16, 31)
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    out = torch.empty_like(q)
    t_fp, t_sd = bench_pair(lambda: attention(q, k, v, causal=True, out=out),
                            lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True), iters=20, rounds=3)
    ref = F.scaled_dot_product_attention(qt, kt, vt, is_causal=True).transpose(1, 2)
    rel = rel_err(out, ref)
    ratio = t_sd / t_fp
    tf = 4 * 4096 ** 2 * 128 * 16 * 2 / 2 / t_fp / 1e12
    st = "WRONG" if rel >= 1e-2 else ("SLOW" if ratio < 0.85 else "OK")
    return st, f"{t_fp * 1e6:.0f} us ({tf:.0f} TFLOP/s) vs SDPA {t_sd * 1e6:.0f} us: {ratio:.2f}x SDPA (SLOW < 0.85); rel vs SDPA {rel:.1e}"


# ============================================================================ pipeline
@scenario("pipe_vit_b16_fp16_nhwc_uint8_512imgs", timeout=240)
def pipe_vit():
    import torch
    import torchvision
    import fullpipe as fp
    torch.manual_seed(SEED)
    m = torchvision.models.vit_b_16(weights=None)
    m.heads = torch.nn.Identity()                     # (torchvision zero-inits the head: use the features)
    m = m.cuda().half().eval()
    mean = torch.tensor([0.485, 0.456, 0.406], device="cuda", dtype=torch.float16).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225], device="cuda", dtype=torch.float16).view(1, 3, 1, 1)

    @torch.inference_mode()
    def f(u8):                                        # (n, 224, 224, 3) uint8 -> (n, 768) float32
        x = u8.permute(0, 3, 1, 2).half().div(255).sub(mean).div(std)
        return m(x).float()

    x = np.random.default_rng(1).integers(0, 256, size=(512, 224, 224, 3), dtype=np.uint8)
    with fp.StreamPipeline(f) as pipe:
        y, t1 = timed(lambda: pipe.run(x))
        y2, t2 = timed(lambda: pipe.run(x))
        chunk = (pipe.stats.chunk or {}).get("rows")
    ref, t_naive = timed(lambda: f(torch.from_numpy(x).cuda()).cpu())
    _, t_naive = timed(lambda: f(torch.from_numpy(x).cuda()).cpu())
    if not isinstance(y, np.ndarray):
        return "WRONG", f"numpy in, {type(y).__name__} out"
    rel = max(rel_err(y, ref), rel_err(y2, ref))
    st, d = verdict(rel, 1e-2, f"first run {t1:.2f} s, second {t2 * 1e3:.0f} ms, naive whole-batch "
                               f"f(x.cuda()).cpu() {t_naive * 1e3:.0f} ms; chunk {chunk} rows")
    if st == "OK" and t2 > 1.3 * t_naive:
        return "SLOW", d + " (SLOW: 2nd run > 1.3x naive)"
    return st, d


@scenario("pipe_mobilenet_v3_small_fp16_torch_cpu_tensor_chunk_int", timeout=240)
def pipe_mobilenet():
    import torch
    import torchvision
    import fullpipe as fp
    torch.manual_seed(SEED)
    m = torchvision.models.mobilenet_v3_small(weights=None).cuda().half().eval()

    @torch.inference_mode()
    def f(t):
        return m(t).float()

    x = torch.randn(2000, 3, 96, 96).half()            # a torch CPU fp16 tensor, pageable
    with fp.StreamPipeline(f, chunk=256) as pipe:
        y, t1 = timed(lambda: pipe.run(x))
        y2, t2 = timed(lambda: pipe.run(x))
        padded = pipe.stats.padded
    ref = f(x.cuda()).cpu()
    if not torch.is_tensor(y):
        return "WRONG", f"torch tensor in, {type(y).__name__} out"
    rel = max(rel_err(y, ref), rel_err(y2, ref))
    return verdict(rel, 1e-2, f"first run {t1:.2f} s, second {t2 * 1e3:.0f} ms, padded {padded}")


@scenario("pipe_fn_returns_tuple")
def pipe_tuple():
    import fullpipe as fp
    x = np.random.default_rng(2).standard_normal((4096, 16)).astype(np.float32)
    with fp.StreamPipeline(lambda t: (t * 2, t + 1)) as pipe:
        return expect_error(lambda: pipe.run(x))


@scenario("pipe_fn_returns_dict")
def pipe_dict():
    import fullpipe as fp
    x = np.random.default_rng(3).standard_normal((1 << 20, 16)).astype(np.float32)  # 64 MiB: pipelined
    with fp.StreamPipeline(lambda t: {"logits": t * 2, "h": t}) as pipe:
        return expect_error(lambda: pipe.run(x))


@scenario("pipe_rowwise_reduction_to_1d")
def pipe_reduce():
    import torch
    import fullpipe as fp
    x = np.random.default_rng(4).standard_normal((1 << 20, 32)).astype(np.float32)  # 128 MiB
    with fp.StreamPipeline(lambda t: t.sum(dim=1)) as pipe:
        y = pipe.run(x)
    ref = torch.from_numpy(x).cuda().sum(dim=1)
    if tuple(y.shape) != (x.shape[0],):
        return "WRONG", f"shape {tuple(y.shape)}, expected ({x.shape[0]},)"
    return verdict(rel_err(y, ref), 1e-5, "(rows,) float32 out")


@scenario("pipe_fn_returns_fewer_rows")
def pipe_fewer():
    import fullpipe as fp
    x = np.random.default_rng(5).standard_normal((1 << 20, 32)).astype(np.float32)
    with fp.StreamPipeline(lambda t: t[::2].contiguous()) as pipe:
        return expect_error(lambda: pipe.run(x))


@scenario("pipe_fn_returns_cpu_tensor")
def pipe_cpu_out():
    import fullpipe as fp
    x = np.random.default_rng(6).standard_normal((1 << 18, 32)).astype(np.float32)  # 32 MiB
    with fp.StreamPipeline(lambda t: (t * 2).cpu()) as pipe:
        return expect_error(lambda: pipe.run(x),
                            on_success=lambda y: verdict(rel_err(y, x * 2), 1e-6, "a CPU tensor from f accepted"))


@scenario("pipe_int64_ids_embedding_meanpool")
def pipe_embedding():
    import torch
    import fullpipe as fp
    torch.manual_seed(SEED)
    emb = torch.nn.Embedding(30000, 128).cuda().eval()

    @torch.inference_mode()
    def f(ids):
        return emb(ids).mean(dim=1)

    ids = np.random.default_rng(7).integers(0, 30000, size=(50_000, 32), dtype=np.int64)
    with fp.StreamPipeline(f) as pipe:
        y, t1 = timed(lambda: pipe.run(ids))
        y2, t2 = timed(lambda: pipe.run(ids))
    ref = f(torch.from_numpy(ids).cuda())
    rel = max(rel_err(y, ref), rel_err(y2, ref))
    return verdict(rel, 1e-5, f"{describe(y)}; runs {t1 * 1e3:.0f} / {t2 * 1e3:.0f} ms")


@scenario("pipe_gru_run_batches_24_sizes", timeout=180)
def pipe_gru():
    import torch
    import fullpipe as fp
    torch.manual_seed(SEED)
    gru = torch.nn.GRU(32, 64, num_layers=2, batch_first=True).cuda().eval()

    @torch.inference_mode()
    def f(t):                                        # (b, 40, 32) -> last layer's final hidden state (b, 64)
        return gru(t)[1][-1]

    rng = np.random.default_rng(8)
    batches = [rng.standard_normal((int(b), 40, 32)).astype(np.float32) for b in rng.integers(1, 513, 24)]
    with fp.StreamPipeline(f) as pipe:
        ys, t1 = timed(lambda: pipe.run_batches(batches))
        ys2, t2 = timed(lambda: pipe.run_batches(batches))
        path = (pipe.stats.list_path or {}).get("path") if pipe.stats else None
    refs = [f(torch.from_numpy(b).cuda()) for b in batches]
    if len(ys) != len(batches):
        return "WRONG", f"{len(ys)} outputs for {len(batches)} batches"
    rel = max(max(rel_err(y, r) for y, r in zip(ys, refs)), max(rel_err(y, r) for y, r in zip(ys2, refs)))
    return verdict(rel, 1e-4, f"runs {t1:.2f} s / {t2 * 1e3:.0f} ms; list path {path}")


@scenario("pipe_pinned_torch_cpu_input_bf16_mlp")
def pipe_pinned():
    import torch
    import fullpipe as fp
    torch.manual_seed(SEED)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(),
                                torch.nn.Linear(1024, 128)).to("cuda", torch.bfloat16).eval()

    @torch.inference_mode()
    def f(t):
        return model(t.to(torch.bfloat16)).float()

    x = torch.randn(100_000, 256).pin_memory()
    with fp.StreamPipeline(f) as pipe:
        y = pipe.run(x)
        staging = pipe.stats.staging
    ref = f(x.cuda())
    if not torch.is_tensor(y):
        return "WRONG", f"torch in, {type(y).__name__} out"
    st, d = verdict(rel_err(y, ref), 1e-2, f"out pinned={y.is_pinned()}; staging {staging}")
    if st == "OK" and not y.is_pinned():
        st, d = "WRONG", d + " (README: pinned in -> pinned out)"
    return st, d


@scenario("pipe_cupy_fn_numpy_input")
def pipe_cupy():
    import cupy
    import fullpipe as fp

    def g(a):
        return cupy.tanh(a) * 2 + a

    x = np.random.default_rng(9).standard_normal((1 << 20, 16)).astype(np.float32)  # 64 MiB
    with fp.StreamPipeline(g, form="cupy") as pipe:
        y = pipe.run(x)
    ref = cupy.asnumpy(g(cupy.asarray(x)))
    if not isinstance(y, np.ndarray) or y.shape != ref.shape or y.dtype != ref.dtype:
        return "WRONG", f"got {describe(y)}, expected {describe(ref)}"
    n_bad = int((y != ref).sum())
    return ("OK" if n_bad == 0 else "WRONG"), f"{n_bad} elements differ from CuPy on the whole array (expect 0)"


@scenario("pipe_chunk_4MiB_exact")
def pipe_chunk_mib():
    import fullpipe as fp
    x = np.random.default_rng(10).standard_normal((1 << 20, 32)).astype(np.float32)  # 128 MiB, 128 B a row
    with fp.StreamPipeline(lambda t: t * 2 + 1, chunk="4MiB") as pipe:
        y = pipe.run(x)
        rows = (pipe.stats.chunk or {}).get("rows")
        batches = pipe.stats.batches
    ref = x * np.float32(2) + np.float32(1)
    exact = np.array_equal(y, ref)
    right_chunk = rows == (4 << 20) // 128
    return ("OK" if exact and right_chunk else "WRONG"), f"exact={exact}; chunk rows {rows} (expect 32768), {batches} batches"


@scenario("pipe_chunk_int_rows_exact")
def pipe_chunk_int():
    import torch
    import fullpipe as fp
    x = np.random.default_rng(11).standard_normal((200_000, 64)).astype(np.float32)
    with fp.StreamPipeline(lambda t: torch.sqrt(t.abs()), chunk=10_000) as pipe:
        y = pipe.run(x)
        rows = (pipe.stats.chunk or {}).get("rows")
        batches = pipe.stats.batches
    exact = np.array_equal(y, np.sqrt(np.abs(x)))
    return ("OK" if exact and rows == 10_000 else "WRONG"), f"exact={exact}; chunk rows {rows}, {batches} batches"


def _chunk_bad(value):
    import fullpipe as fp
    x = np.ones((1000, 8), np.float32)

    def built(_):
        return "WRONG", f"chunk={value!r} accepted at construction"
    return expect_error(lambda: fp.StreamPipeline(lambda t: t * 2, chunk=value).run(x), on_success=built)


@scenario("pipe_chunk_0")
def pipe_chunk_0():
    return _chunk_bad(0)


@scenario("pipe_chunk_negative")
def pipe_chunk_neg():
    return _chunk_bad(-5)


@scenario("pipe_chunk_abc")
def pipe_chunk_abc():
    return _chunk_bad("abc")


@scenario("pipe_compute_raises_midrun_then_reused")
def pipe_raises():
    import fullpipe as fp
    state = {"calls": 0, "fail_at": 5}

    def f(t):
        state["calls"] += 1
        if state["fail_at"] and state["calls"] == state["fail_at"]:
            raise RuntimeError("boom in call 5")
        return t * 3

    x = np.random.default_rng(12).standard_normal((200_000, 64)).astype(np.float32)  # 20 chunks
    with fp.StreamPipeline(f, chunk=10_000) as pipe:
        try:
            pipe.run(x)
            return "WRONG", f"no exception surfaced ({state['calls']} calls)"
        except RuntimeError as e:
            if "boom" not in str(e):
                raise
            surfaced = f"RuntimeError surfaced, batch_index={getattr(e, 'batch_index', None)}"
        state["fail_at"] = 0
        y = pipe.run(x)
        y2 = pipe.run(x[:77_777].copy())
    exact = np.array_equal(y, x * np.float32(3)) and np.array_equal(y2, x[:77_777] * np.float32(3))
    return ("OK" if exact else "WRONG"), f"{surfaced}; runs after it exact={exact}"


@scenario("pipe_two_pipelines_two_threads_shared_pool", timeout=180)
def pipe_threads():
    import torch
    import fullpipe as fp
    pool = fp.DevicePool(fp.Device(), release_threshold="max")
    torch.manual_seed(SEED)
    lin = torch.nn.Linear(64, 96).cuda().eval()

    @torch.inference_mode()
    def fa(t):
        return t.sin() * 3

    @torch.inference_mode()
    def fb(t):
        return lin(t)

    xa = np.random.default_rng(13).standard_normal((1 << 18, 64)).astype(np.float32)
    xb = np.random.default_rng(14).standard_normal((1 << 18, 64)).astype(np.float32)
    with torch.inference_mode():
        ra, rb = fa(torch.from_numpy(xa).cuda()).cpu(), fb(torch.from_numpy(xb).cuda()).cpu()
    results, errors = {}, {}

    def worker(name, f, x, ref, tol):
        try:
            with fp.StreamPipeline(f, pool=pool) as pipe:
                worst = 0.0
                for _ in range(4):
                    worst = max(worst, rel_err(pipe.run(x), ref))
            results[name] = (worst, tol)
        except BaseException as e:  # noqa: BLE001
            errors[name] = fmt_exc(e)

    ts = [threading.Thread(target=worker, args=("sin", fa, xa, ra, 1e-6)),
          threading.Thread(target=worker, args=("linear", fb, xb, rb, 1e-4))]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join(150)
    dt = time.perf_counter() - t0
    if any(t.is_alive() for t in ts):
        return "ERROR", f"a thread still runs after 150 s; results {results}, errors {errors}"
    if errors:
        return "ERROR", "; ".join(f"{k}: {v}" for k, v in errors.items())
    bad = [k for k, (w, tol) in results.items() if not w < tol]
    return ("OK" if not bad else "WRONG"), (", ".join(f"{k} max rel {w:.1e} (tol {tol:g})" for k, (w, tol) in results.items())
                                           + f"; 4 runs each in {dt:.2f} s")


@scenario("pipe_stats_print")
def pipe_stats():
    import fullpipe as fp
    x = np.random.default_rng(15).standard_normal((1 << 21, 16)).astype(np.float32)  # 128 MiB
    with fp.StreamPipeline(lambda t: t.sin()) as pipe:
        pipe.run(x)
        pipe.run(x)
        text = str(pipe.stats)
        staging, chunk = pipe.stats.staging, pipe.stats.chunk or {}
    STATS_TEXT.append(text)
    lines = text.splitlines()
    ok = len(lines) >= 2 and "batches" in lines[0]
    return ("OK" if ok else "WRONG"), (f"{len(lines)} lines; first: {one_line(lines[0] if lines else '', 150)}; "
                                       f"chunk rows {chunk.get('rows')} ({chunk.get('source')}); staging {staging}")


@scenario("pipe_cuda_tensor_as_input")
def pipe_cuda_input():
    import torch
    import fullpipe as fp
    x = torch.randn(1000, 8, device="cuda")
    with fp.StreamPipeline(lambda t: t * 2) as pipe:
        return expect_error(lambda: pipe.run(x),
                            on_success=lambda y: verdict(rel_err(y, x * 2), 1e-6, "a CUDA tensor accepted"))


@scenario("pipe_noncontiguous_numpy_input")
def pipe_noncontig():
    import fullpipe as fp
    x = np.random.default_rng(16).standard_normal((1000, 64)).astype(np.float32)[:, ::2]
    with fp.StreamPipeline(lambda t: t * 2) as pipe:
        return expect_error(lambda: pipe.run(x),
                            on_success=lambda y: verdict(rel_err(y, x * 2), 1e-6, "a strided array accepted"))


@scenario("pipe_empty_input_0_rows")
def pipe_empty():
    import fullpipe as fp
    x = np.zeros((0, 16), np.float32)

    def judged(y):
        good = getattr(y, "shape", None) == (0, 16)
        return ("OK" if good else "WRONG"), f"returned {describe(y)}"
    with fp.StreamPipeline(lambda t: t * 2) as pipe:
        return expect_error(lambda: pipe.run(x), on_success=judged)


@scenario("pipe_fullpipe_hopper_gemm_inside_tensor_fn")
def pipe_gemm_inside():
    # level 1 + level 2: the compute is fullpipe's own Hopper GEMM on the lane's stream
    import torch
    import fullpipe as fp
    from fullpipe.kernels import gemm
    g = torch.Generator(device="cuda").manual_seed(17)
    w = (torch.randn(1536, 1024, device="cuda", generator=g) * 0.03).to(torch.bfloat16)   # (N, K), nn.Linear layout

    def f(t):
        return gemm(t.to(torch.bfloat16), w.T, variant="hopper", stream=torch.cuda.current_stream()).float()

    x = np.random.default_rng(18).standard_normal((32768, 1024)).astype(np.float32)  # 128 MiB
    with fp.StreamPipeline(f) as pipe:
        y, t1 = timed(lambda: pipe.run(x))
        y2, t2 = timed(lambda: pipe.run(x))
    xt = torch.from_numpy(x).cuda().to(torch.bfloat16).float()
    ref = xt @ w.float().T
    rel = max(rel_err(y, ref), rel_err(y2, ref))
    return verdict(rel, 1e-2, f"runs {t1 * 1e3:.0f} / {t2 * 1e3:.0f} ms")


@scenario("pipe_imap_generator_refilling_one_buffer")
def pipe_imap_refill():
    import fullpipe as fp
    buf = np.empty((8192, 256), np.float32)                    # 8 MiB, refilled for every batch

    def gen():
        for i in range(12):
            buf[:] = float(i)
            yield buf

    with fp.StreamPipeline(lambda t: t * 3) as pipe:
        def judged(outs):
            wrong = [i for i, o in enumerate(outs) if not np.all(np.asarray(o) == 3.0 * i)]
            return ("OK" if not wrong else "WRONG"), (f"{len(outs)} outputs, wrong ones: {wrong[:8]}" if wrong
                                                      else f"{len(outs)} outputs, all right (handled)")
        return expect_error(lambda: list(pipe.imap(gen())), on_success=judged)


@scenario("pipe_two_arg_fn_form_detection")
def pipe_two_arg():
    import fullpipe as fp
    return expect_error(lambda: fp.StreamPipeline(lambda x, y: x),
                        on_success=lambda p: ("WRONG", f"built a pipeline of form {getattr(p, 'form', '?')}"))


# ============================================================================ driver
def run_one(name, fn, timeout):
    import torch
    faulthandler.dump_traceback_later(timeout, exit=True)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as wl:
        warnings.simplefilter("always")
        try:
            status, detail = fn()
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: BLE001 - every scenario isolated
            status, detail = "ERROR", fmt_exc(e)
        try:
            torch.cuda.synchronize()
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: BLE001 - an asynchronous CUDA error: the context may be gone
            status, detail = "ERROR", f"{detail} ; then synchronize: {fmt_exc(e)}"
    faulthandler.cancel_dump_traceback_later()
    dt = time.perf_counter() - t0
    msgs = sorted({one_line(f"{w.category.__name__}: {w.message}", 140) for w in wl})
    warn = f" [warnings: {' | '.join(msgs[:2])}{' ...' if len(msgs) > 2 else ''}]" if msgs else ""
    line = f"SCENARIO {name} | {status} | {one_line(detail, 600)} [{dt:.2f} s]{warn}"
    print(line, flush=True)
    gc.collect()
    try:
        torch.cuda.empty_cache()
    except BaseException:  # noqa: BLE001
        pass
    return status


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--only", default="", help="run scenarios whose name contains this")
    ap.add_argument("--exact", default="", help="run the one scenario of this name")
    ap.add_argument("--isolate", action="store_true", help="each scenario in a process of its own")
    args = ap.parse_args()
    chosen = [s for s in SCENARIOS if args.only in s[0] and (not args.exact or s[0] == args.exact)]
    if args.list:
        for name, _, t in SCENARIOS:
            print(name)
        return 0
    print(f"p255 new-user scenarios: {len(chosen)} of {len(SCENARIOS)}", flush=True)
    statuses: dict[str, str] = {}
    t_all = time.perf_counter()
    if args.isolate:
        for name, _, timeout in chosen:
            try:
                p = subprocess.run([sys.executable, os.path.abspath(__file__), "--exact", name], capture_output=True,
                                   text=True, timeout=timeout + 60)
                lines = [ln for ln in p.stdout.splitlines() if ln.startswith("SCENARIO ")]
                line = lines[0] if lines else (f"SCENARIO {name} | ERROR | process rc {p.returncode}, no line; "
                                               f"stderr: {one_line(p.stderr[-300:], 300)}")
            except subprocess.TimeoutExpired:
                line = f"SCENARIO {name} | ERROR | process timed out after {timeout + 60} s"
            print(line, flush=True)
            statuses[name] = line.split(" | ")[1].strip()
    else:
        import torch
        torch.manual_seed(SEED)
        np.random.seed(SEED)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        try:
            import cupy
            cupy.random.seed(SEED)
            cupy_v = cupy.__version__
        except Exception as e:  # noqa: BLE001
            cupy_v = f"unavailable ({type(e).__name__})"
        import fullpipe as fp
        try:
            import torchvision
            tv = torchvision.__version__
        except Exception as e:  # noqa: BLE001
            tv = f"unavailable ({type(e).__name__})"
        print(f"python {sys.version.split()[0]}, torch {torch.__version__}, torchvision {tv}, cupy {cupy_v}, "
              f"fullpipe {fp.__version__} from {os.path.dirname(fp.__file__)}; "
              f"GPU {torch.cuda.get_device_name(0)} cc {torch.cuda.get_device_capability(0)}", flush=True)
        for name, fn, timeout in chosen:
            statuses[name] = run_one(name, fn, timeout)
    total = time.perf_counter() - t_all
    if args.exact:
        return 0
    print("\n==== SUMMARY ====")
    print(f"{'status':8s} {'count':>5s}")
    for st in ("OK", "WRONG", "ERROR", "SLOW"):
        print(f"{st:8s} {sum(1 for v in statuses.values() if v == st):5d}")
    print(f"{'total':8s} {len(statuses):5d}   ({total:.1f} s)")
    for st in ("WRONG", "ERROR", "SLOW"):
        names = [k for k, v in statuses.items() if v == st]
        if names:
            print(f"{st}: {', '.join(names)}")
    for text in STATS_TEXT:
        print("\n==== print(pipe.stats) from pipe_stats_print ====")
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
