"""GPU tests of the Hopper GEMM ladder against cuBLAS (torch.matmul) and a float64
reference: fresh random inputs, poisoned outputs, every element written."""

from __future__ import annotations

import pytest

from fullpipe.kernels.hopper_gemm import SWEEP_BUILDS, VARIANTS, gemm_hopper

pytestmark = pytest.mark.gpu

SHAPES = [
    (512, 512, 512),      # whole tiles
    (1024, 768, 384),     # rectangular, several tiles each way
    (200, 264, 72),       # edges in M, N and K (partial tiles and slices)
    (130, 520, 1000),     # M just past a tile, K not a multiple of 64
    (1, 8, 8),            # the smallest legal problem
    (777, 1032, 4104),    # odd M, long K
]


def _inputs(m, n, k, dtype, seed):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", generator=g).to(dtype)
    b = torch.randn(k, n, device="cuda", generator=g).to(dtype)
    return a, b


def _rel(x, ref):
    import torch

    return float(torch.linalg.norm(x.double() - ref) / torch.linalg.norm(ref))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_cublas_and_float64(variant, dtype_name, shape):
    import torch

    dtype = getattr(torch, dtype_name)
    m, n, k = shape
    a, b = _inputs(m, n, k, dtype, seed=hash((variant, dtype_name, shape)) % 2**31)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)  # poison
    got = gemm_hopper(a, b, variant=variant, out=out)
    torch.cuda.synchronize()
    assert got is out
    assert not torch.isnan(out).any(), "some outputs were never written"
    ref = a.double() @ b.double()
    err = _rel(out, ref)
    cublas = _rel(torch.matmul(a, b), ref)
    assert err < 1e-2, f"{variant} {dtype_name} {shape}: rel err {err:.2e} (cuBLAS {cublas:.2e})"
    assert err < 4 * cublas + 1e-3, f"{variant}: {err:.2e} vs cuBLAS {cublas:.2e}"


@pytest.mark.parametrize("variant", VARIANTS)
def test_allocates_the_output_and_repeats_identically(variant):
    import torch

    a, b = _inputs(384, 512, 256, torch.bfloat16, seed=7)
    c1 = gemm_hopper(a, b, variant=variant)
    c2 = gemm_hopper(a, b, variant=variant)
    torch.cuda.synchronize()
    assert c1.dtype == torch.bfloat16 and c1.shape == (384, 512)
    assert torch.equal(c1, c2), "the same inputs must give the same bits (a race would not)"


def test_persistent_without_multicast_computes_the_same():
    import torch

    a, b = _inputs(640, 1024, 512, torch.float16, seed=11)
    c_mc = gemm_hopper(a, b, variant="persistent")
    c_own = gemm_hopper(a, b, variant="persistent", _multicast=False)
    torch.cuda.synchronize()
    assert torch.equal(c_mc, c_own)


# Edges for the build options: a 2 x 2 or 4 x 1 cluster with blocks wholly outside C,
# Hilbert walks that skip cells of a non-square grid, K not a multiple of 64.
BUILD_SHAPES = [(200, 264, 72), (777, 1032, 4104), (1200, 1704, 520), (2304, 520, 136)]


@pytest.mark.parametrize("build", SWEEP_BUILDS, ids=lambda b: b.label)
@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
def test_every_persistent_build_matches_float64(build, dtype_name):
    import torch

    dtype = getattr(torch, dtype_name)
    for m, n, k in BUILD_SHAPES:
        a, b = _inputs(m, n, k, dtype, seed=m + n + k)
        out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
        gemm_hopper(a, b, variant="persistent", out=out, _build=build)
        torch.cuda.synchronize()
        assert not torch.isnan(out).any(), f"{build.label} {m}x{n}x{k}: some outputs were never written"
        err = _rel(out, a.double() @ b.double())
        assert err < 1e-2, f"{build.label} {dtype_name} {m}x{n}x{k}: rel err {err:.2e}"


def test_cupy_inputs():
    cupy = pytest.importorskip("cupy")
    import numpy as np

    rng = np.random.default_rng(3)
    a = cupy.asarray(rng.standard_normal((256, 128)).astype(np.float16))
    b = cupy.asarray(rng.standard_normal((128, 192)).astype(np.float16))
    c = gemm_hopper(a, b, variant="ws")
    cupy.cuda.get_current_stream().synchronize()
    ref = a.astype(np.float64) @ b.astype(np.float64)
    err = float(cupy.linalg.norm(c.astype(np.float64) - ref) / cupy.linalg.norm(ref))
    assert c.dtype == np.float16 and err < 1e-2


def test_errors_name_the_constraint():
    import torch

    a = torch.randn(64, 36, device="cuda").to(torch.bfloat16)
    b = torch.randn(36, 64, device="cuda").to(torch.bfloat16)
    with pytest.raises(ValueError, match="multiples of 8"):
        gemm_hopper(a, b, variant="tma")
    with pytest.raises(ValueError, match="bfloat16 or float16"):
        gemm_hopper(torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda"))
    flat = torch.randn(64 * 64 + 4, device="cuda").to(torch.float16)
    shifted = flat[4:].view(64, 64)  # contiguous, but 8 bytes past an aligned address
    with pytest.raises(ValueError, match="16-byte aligned"):
        gemm_hopper(shifted, torch.randn(64, 64, device="cuda").to(torch.float16))
