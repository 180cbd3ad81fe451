"""GPU tests of the level-2 kernels: results against PyTorch in float64 on fresh
random inputs, outputs poisoned (NaN) first, for square, rectangular and odd sizes."""

from __future__ import annotations

import pytest

from fullpipe import kernels
from fullpipe.kernels.gemm import WMMA_CANDIDATES, launch_plan, plan, wmma_config

from ._torch import needs_torch, torch

_needs_torch = pytest.fixture(autouse=True)(needs_torch)


pytestmark = pytest.mark.gpu

FP32_SHAPES = [  # (M, N, K)
    (256, 256, 256),  # tile multiples
    (512, 384, 640),  # rectangular
    (1000, 1004, 996),  # not tile multiples, vector path (K, N % 4 == 0)
    (129, 67, 33),  # odd: element-copy path
    (1, 1, 1),
    (300, 2000, 17),  # odd K, wide
    (2048, 2048, 64),  # more tiles than SMs: the persistent loops wrap
]
F16_SHAPES = [(256, 256, 256), (512, 768, 384), (1000, 1008, 520), (129, 264, 40), (8, 8, 8), (2048, 1024, 128)]


def _inputs(m, n, k, dtype, seed):
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", generator=g).to(dtype)
    b = torch.randn(k, n, device="cuda", generator=g).to(dtype)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)  # poison
    torch.cuda.synchronize()  # inputs and poison are in place before our stream runs
    return a, b, out


def _check(out, a, b, tol, what):
    ref = a.double() @ b.double()
    unwritten = int(torch.isnan(out).sum())
    assert unwritten == 0, f"{what}: {unwritten} of {out.numel()} outputs never written (still NaN) or NaN"
    rel = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref).clamp_min(1e-30))
    assert rel < tol, f"{what}: relative error {rel:.3e} >= {tol:g}"


FP32_CASES = [("tiled", None)] + [("double_buffer", s) for s in (2, 3, 4)] + [("warp_specialized", s) for s in (2, 3, 4)]


@pytest.mark.parametrize("variant, stages", FP32_CASES, ids=[f"{v}-s{s}" for v, s in FP32_CASES])
@pytest.mark.parametrize("shape", FP32_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_fp32_gemm_matches_float64_reference(variant, stages, shape, stream):
    m, n, k = shape
    a, b, out = _inputs(m, n, k, torch.float32, seed=hash(shape) % 1000)
    kernels.gemm(a, b, variant=variant, stages=stages, stream=stream, out=out)
    stream.sync()
    _check(out, a, b, 1e-4, f"{variant} stages={stages} {shape}")


@pytest.mark.parametrize("variant", ["tiled", "double_buffer", "warp_specialized"])
def test_fp32_gemm_misaligned_views_take_the_element_path(variant, stream):
    m, n, k = 200, 136, 72
    base_a = torch.randn(m * k + 1, device="cuda")
    base_b = torch.randn(k * n + 1, device="cuda")
    a, b = base_a[1:].view(m, k), base_b[1:].view(k, n)  # 4-byte offset: not 16-byte aligned
    out = torch.full((m, n), float("nan"), device="cuda")
    torch.cuda.synchronize()
    kernels.gemm(a, b, variant=variant, stream=stream, out=out)
    stream.sync()
    _check(out, a, b, 1e-4, f"{variant} misaligned")


DEFAULT_WMMA_STAGES = [s for s in (2, 3, 4, 5) if wmma_config(None).with_stages(s).shared_mem <= 227 * 1024]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"], ids=["fp16", "bf16"])
@pytest.mark.parametrize("stages", DEFAULT_WMMA_STAGES)
@pytest.mark.parametrize("shape", F16_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_wmma_gemm_matches_upcast_reference(dtype, stages, shape, stream):
    m, n, k = shape
    a, b, out = _inputs(m, n, k, dtype, seed=7 + stages)
    kernels.gemm(a, b, variant="wmma", stages=stages, stream=stream, out=out)
    stream.sync()
    _check(out, a, b, 1e-2, f"wmma {dtype} stages={stages} {shape}")


# Every candidate tiling: square, rectangular (M != N, K not a multiple of BK), odd M,
# tiny, and more tiles than SMs.
WMMA_CONFIG_SHAPES = [(512, 512, 512), (384, 1000, 328), (129, 264, 40), (8, 8, 8), (2048, 1536, 96)]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"], ids=["fp16", "bf16"])
@pytest.mark.parametrize("config", WMMA_CANDIDATES, ids=lambda c: c.name)
@pytest.mark.parametrize("shape", WMMA_CONFIG_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_every_wmma_tiling_matches_upcast_reference(dtype, config, shape, stream):
    m, n, k = shape
    a, b, out = _inputs(m, n, k, dtype, seed=11)
    kernels.gemm(a, b, variant="wmma", config=config, stream=stream, out=out)
    stream.sync()
    _check(out, a, b, 1e-2, f"wmma {dtype} {config.name} {shape}")


@pytest.mark.parametrize("variant, stages", [("tiled", None), ("double_buffer", 2), ("double_buffer", 4)])
def test_forced_one_block_per_sm_launch_gives_the_same_result(variant, stages, stream):
    # The benchmark's equal-occupancy launches pad the dynamic shared memory.
    m, n, k = 1000, 1004, 996
    a, b, out = _inputs(m, n, k, torch.float32, seed=13)
    p = plan(variant, m, n, k, "float32", stages=stages)
    launch_plan(p, a.data_ptr(), b.data_ptr(), out.data_ptr(), m, n, k, stream=stream, shared_mem=120 * 1024)
    stream.sync()
    _check(out, a, b, 1e-4, f"{variant} s{stages} @1 block/SM")


def test_gemm_allocates_a_torch_output_and_repeats_bitwise(stream):
    a, b, _ = _inputs(384, 512, 256, torch.float32, seed=3)
    c1 = kernels.gemm(a, b, variant="double_buffer", stream=stream)
    c2 = kernels.gemm(a, b, variant="double_buffer", stream=stream)
    stream.sync()
    assert isinstance(c1, torch.Tensor) and c1.shape == (384, 512) and c1.dtype == torch.float32
    assert torch.equal(c1, c2)
    _check(c1, a, b, 1e-4, "allocated output")


def test_gemm_accepts_cupy_arrays(stream):
    cupy = pytest.importorskip("cupy")
    a = cupy.random.standard_normal((200, 120), dtype=cupy.float32)
    b = cupy.random.standard_normal((120, 88), dtype=cupy.float32)
    cupy.cuda.Device().synchronize()
    c = kernels.gemm(a, b, variant="tiled", stream=stream)
    stream.sync()
    ref = cupy.asnumpy(a).astype("float64") @ cupy.asnumpy(b).astype("float64")
    import numpy as np

    rel = np.linalg.norm(cupy.asnumpy(c) - ref) / np.linalg.norm(ref)
    assert rel < 1e-4


def test_out_of_wrong_shape_is_a_value_error(stream):
    a, b, _ = _inputs(64, 64, 64, torch.float32, seed=1)
    with pytest.raises(ValueError, match="out must be"):
        kernels.gemm(a, b, stream=stream, out=torch.empty(64, 63, device="cuda"))
    with pytest.raises(ValueError, match="contiguous"):
        kernels.gemm(a.t(), b, stream=stream)
    with pytest.raises(TypeError, match="CPU tensor"):
        kernels.gemm(a.cpu(), b, stream=stream)


@pytest.mark.parametrize("persistent", [False, True], ids=["per_tile", "persistent"])
@pytest.mark.parametrize("shape", [(4096, 4096, 32), (1000, 1004, 36), (64, 64, 16), (130, 68, 100)],
                         ids=lambda s: "x".join(map(str, s)))
def test_small_tiles_gemm(persistent, shape, stream):
    m, n, k = shape
    for rep in range(2):  # the second launch checks that the work queue was reset
        a, b, out = _inputs(m, n, k, torch.float32, seed=11 + rep)
        kernels.small_tiles_gemm(a, b, persistent=persistent, stream=stream, out=out)
        stream.sync()
        _check(out, a, b, 1e-4, f"small tiles persistent={persistent} {shape} launch {rep}")


@pytest.mark.parametrize("share_a", [False, True], ids=["own_a", "shared_a"])
@pytest.mark.parametrize("shape", [(512, 512, 512), (1000, 1004, 36), (64, 64, 16), (200, 520, 100)],
                         ids=lambda s: "x".join(map(str, s)))
def test_cluster_gemm(share_a, shape, stream):
    m, n, k = shape
    a, b, out = _inputs(m, n, k, torch.float32, seed=5)
    kernels.cluster_gemm(a, b, share_a=share_a, stream=stream, out=out)
    stream.sync()
    _check(out, a, b, 1e-4, f"cluster share_a={share_a} {shape}")


@pytest.mark.parametrize("grid_sync", [True, False], ids=["grid_sync", "two_launches"])
@pytest.mark.parametrize("n", [1, 1000, 1 << 22])
def test_normalize(grid_sync, n, stream):
    x = torch.rand(n, device="cuda") + 0.5
    y = torch.full((n,), float("nan"), device="cuda")
    torch.cuda.synchronize()
    kernels.normalize(x, stream=stream, out=y, grid_sync=grid_sync)
    stream.sync()
    ref = x.double() / x.double().sum()
    rel = float(torch.linalg.norm(y.double() - ref) / torch.linalg.norm(ref))
    assert not torch.isnan(y).any() and rel < 1e-5, f"grid_sync={grid_sync} n={n}: rel {rel:.2e}"
