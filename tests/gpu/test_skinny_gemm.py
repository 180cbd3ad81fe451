"""GPU tests of the skinny Hopper GEMM (at most 128 rows): against float64 and cuBLAS on
fresh inputs with poisoned outputs, in one run of K and split over a cluster,
deterministic, on side streams, in a CUDA graph, with CuPy arrays; gemm(variant="hopper")
takes it for few rows."""

from __future__ import annotations

import pytest

from fullpipe.kernels import gemm
from fullpipe.kernels import skinny_gemm as sk

from .test_hopper_gemm import _inputs, _rel

pytestmark = pytest.mark.gpu

SHAPES = [
    (1, 8, 8),            # the smallest legal problem
    (8, 4096, 4096),      # a decode step's projection: 64 tiles of 64 columns, K split in 2
    (5, 200, 72),         # edges: N not a multiple of 128, K not of 64
    (16, 1032, 1000),
    (24, 136, 4104),      # a 32-row build with 8 rows past the end
    (33, 1024, 520),      # the 64-row build
    (64, 2048, 8192),     # the 64-row build, K split
    (8, 32000, 1024),     # an LM head: 250 tiles, one run
    (100, 1032, 2056),    # the 128-row build
]


@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_float64_and_cublas_split_or_not(dtype_name, shape):
    import torch

    dtype = getattr(torch, dtype_name)
    m, n, k = shape
    a, b = _inputs(m, n, k, dtype, seed=m * 31 + n * 7 + k)
    ref = a.double() @ b.double()
    cublas = _rel(torch.matmul(a, b), ref)
    for per in (None, 1 << 30, -(-k // 64 // 8)):   # the default split, one run, 8 runs (the largest cluster)
        out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
        got = sk.gemm_skinny(a, b, out=out, _slices_per_run=per)
        torch.cuda.synchronize()
        assert got is out and not torch.isnan(out).any(), f"{shape} per={per}: outputs never written"
        err = _rel(out, ref)
        assert err < 1e-2 and err < 4 * cublas + 1e-3, f"{shape} per={per}: {err:.2e} (cuBLAS {cublas:.2e})"


def test_the_same_bits_every_time():
    """The cluster's first block adds the runs' sums in rank order: the same bits every time."""
    import torch

    a, b = _inputs(8, 4096, 8192, torch.bfloat16, seed=11)
    first = sk.gemm_skinny(a, b)
    for _ in range(20):
        assert torch.equal(sk.gemm_skinny(a, b), first)


def test_gemm_hopper_variant_takes_the_skinny_kernel_for_few_rows():
    import torch

    from fullpipe.kernels import hopper_gemm as hg

    s = torch.cuda.current_stream()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    wide = 128 * sms // 2 + 128   # too many 128-column tiles for the skinny kernel above 64 rows
    for m, n, k, skinny in [(1, 1024, 1024, True), (64, 1024, 1024, True), (65, 1024, 2048, True),
                            (128, 1024, 2048, True), (129, 1024, 2048, False), (65, wide, 2048, False),
                            (8, 1024, 512, False), (96, 1024, 1024, False)]:   # (short K: the persistent rung)
        a, b = _inputs(m, n, k, torch.float16, seed=m)
        sk._LAUNCHES.clear()
        hg._LAUNCHES.clear()
        out = gemm(a, b, variant="hopper", stream=s)
        torch.cuda.synchronize()
        assert _rel(out, a.double() @ b.double()) < 1e-2
        assert bool(sk._LAUNCHES) == skinny and bool(hg._LAUNCHES) == (not skinny), (m, n)
    with pytest.raises(ValueError, match="1 to 128 rows"):
        gemm(*_inputs(129, 64, 64, torch.float16, seed=1), variant="hopper_skinny", stream=s)


def test_two_streams_and_a_cuda_graph():
    """Split products on two streams at once; then captured in a torch CUDA graph and
    replayed on new inputs."""
    import torch

    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    work = []
    for i, s in enumerate(streams):
        a, b = _inputs(8 + 8 * i, 4096, 4096, torch.bfloat16, seed=i)
        work.append((a, b, torch.empty(a.shape[0], 4096, device="cuda", dtype=torch.bfloat16), s,
                     a.double() @ b.double()))
    torch.cuda.synchronize()
    for _ in range(20):
        for a, b, out, s, _ in work:
            with torch.cuda.stream(s):
                out.fill_(float("nan"))
                sk.gemm_skinny(a, b, out=out)
        for a, b, out, s, ref in work:
            s.synchronize()
            assert not torch.isnan(out).any() and _rel(out, ref) < 1e-2

    a, b = _inputs(8, 2048, 4096, torch.float16, seed=5)
    out = torch.empty(8, 2048, device="cuda", dtype=torch.float16)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        sk.gemm_skinny(a, b, out=out)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        sk.gemm_skinny(a, b, out=out)
    for seed in (1, 2, 3):
        a2, b2 = _inputs(8, 2048, 4096, torch.float16, seed=seed)
        a.copy_(a2)
        b.copy_(b2)
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        assert _rel(out, a2.double() @ b2.double()) < 1e-2


def test_cupy_arrays():
    cupy = pytest.importorskip("cupy")
    import numpy as np

    rng = np.random.default_rng(4)
    a = cupy.asarray(rng.standard_normal((8, 2048)).astype(np.float16))
    b = cupy.asarray(rng.standard_normal((2048, 1024)).astype(np.float16))
    c = sk.gemm_skinny(a, b)
    cupy.cuda.get_current_stream().synchronize()
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert c.dtype == np.float16
    assert float(cupy.linalg.norm(c.astype(np.float64) - ref) / cupy.linalg.norm(ref)) < 1e-2


@pytest.mark.parametrize("m, n, k, w_t", [(33, 1024, 520, False), (100, 1032, 2056, True), (40, 136, 4104, False),
                                          (72, 4096, 1024, True)], ids=lambda c: str(c))
def test_rows_past_m_never_carry_an_earlier_products_values(m, n, k, w_t):
    """Far below its ROWS build the kernel loads A's rows up to M rounded to 8: the slot's
    other rows keep what was there. Right after a product on all-Inf operands of the build's
    full ROWS and long enough to fill every slot (so every row of every slot on the SMs it
    ran on holds Inf), a product on finite operands is finite and matches float64: those
    rows reach only rows of C past M, never stored."""
    import torch

    from .test_hopper_gemm import _all_inf

    a, b = _inputs(m, n, k, torch.bfloat16, seed=m + n + k)
    if w_t:
        b = b.t().contiguous().t()  # w.T of a row-major (N, K) w
    inf_a, inf_b = _all_inf(sk.rows_build(m), n, max(k, 64 * 8), torch.bfloat16, w_t)
    ref = a.double() @ b.double()
    for _ in range(3):
        junk = sk.gemm_skinny(inf_a, inf_b)
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        sk.gemm_skinny(a, b, out=out)
        torch.cuda.synchronize()
        assert torch.isinf(junk).all()
        assert torch.isfinite(out).all(), f"{m}x{n}x{k}: non-finite outputs (values left over from the Inf product)"
        assert _rel(out, ref) < 1e-2, f"{m}x{n}x{k} (w.T {w_t}): rel err {_rel(out, ref):.2e}"
