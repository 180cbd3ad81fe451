"""CPU tests of the kernel fronts: launch planning and the errors users get."""

from __future__ import annotations

import numpy as np
import pytest

from fullpipe.cuda.memory import DeviceArray
from fullpipe.kernels import cluster, gemm, plan, small_tiles_gemm, normalize, cluster_gemm
from fullpipe.kernels.gemm import FP32_STAGE_BYTES, VARIANTS


class FakeStream:  # never reached: validation happens before the stream is used
    def __cuda_stream__(self):
        raise AssertionError("the stream must not be touched before the inputs are validated")


def dev(shape, dtype=np.float32, ptr=0x10000):
    return DeviceArray(ptr, shape, dtype)


def test_plan_picks_vector_or_scalar_kernels_and_grids():
    p = plan("tiled", 4096, 4096, 4096, "float32")
    assert p.kernel == "gemm_tiled_f32" and p.grid == (32, 32) and p.block == 256 and p.shared_mem == 0
    p = plan("tiled", 1000, 1001, 999, "float32")
    assert p.kernel == "gemm_tiled_f32_scalar" and p.grid == (8, 8)
    p = plan("double_buffer", 300, 260, 64, "float32", stages=4)
    assert p.kernel == "gemm_double_buffer_s4" and p.shared_mem == 4 * FP32_STAGE_BYTES == 73728
    assert plan("double_buffer", 64, 64, 64, "float32", aligned=False).kernel.endswith("_scalar")
    p = plan("warp_specialized", 4096, 4096, 4096, "float32", sm_count=132)
    assert p.grid == (132,) and p.block == 320 and p.shared_mem == 4 * FP32_STAGE_BYTES + 128 * 132 * 4
    assert plan("warp_specialized", 100, 100, 100, "float32", sm_count=132).grid == (1,)
    p = plan("wmma", 8192, 8192, 8192, "bfloat16", stages=3)
    assert p.kernel == "gemm_wmma_bf16_s3" and p.grid == (64 * 32,) and p.shared_mem == 81408


def test_plan_shared_memory_fits_an_h100_block():
    for v in VARIANTS.values():
        for s in v.stages or (None,):
            dt = v.dtypes[0]
            assert plan(v.name, 512, 512, 512, dt, stages=s).shared_mem <= 227 * 1024


@pytest.mark.parametrize(
    "args, kwargs, exc, match",
    [
        (("nope", 8, 8, 8, "float32"), {}, ValueError, "unknown variant"),
        (("tiled", 0, 8, 8, "float32"), {}, ValueError, "M must be >= 1"),
        (("tiled", 8, 8, 0, "float32"), {}, ValueError, "K must be >= 1"),
        (("tiled", 8, 8, 8, "float16"), {}, ValueError, "wmma"),
        (("wmma", 8, 8, 8, "float32"), {}, ValueError, "float16 or bfloat16"),
        (("wmma", 8, 12, 8, "float16"), {}, ValueError, "multiples of 8"),
        (("wmma", 8, 8, 12, "float16"), {}, ValueError, "multiples of 8"),
        (("wmma", 8, 8, 8, "float16"), {"aligned": False}, ValueError, "aligned"),
        (("double_buffer", 8, 8, 8, "float32"), {"stages": 5}, ValueError, "stages must be one of"),
        (("wmma", 8, 8, 8, "float16"), {"stages": 2}, ValueError, "stages must be one of"),
        (("tiled", 8, 8, 8, "float32"), {"stages": 2}, ValueError, "no pipeline stages"),
    ],
)
def test_plan_errors_name_the_constraint(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        plan(*args, **kwargs)


def test_gemm_validates_before_touching_the_gpu():
    s = FakeStream()
    with pytest.raises(TypeError, match="stream is required"):
        gemm(dev((4, 4)), dev((4, 4)), stream=None)
    with pytest.raises(TypeError, match="NumPy"):
        gemm(np.ones((4, 4), np.float32), dev((4, 4)), stream=s)
    with pytest.raises(ValueError, match="inner dimensions"):
        gemm(dev((4, 5)), dev((4, 4)), stream=s)
    with pytest.raises(ValueError, match="2-D"):
        gemm(dev((4,)), dev((4, 4)), stream=s)
    with pytest.raises(ValueError, match="same dtype"):
        gemm(dev((4, 4)), dev((4, 4), np.float16), stream=s)
    with pytest.raises(ValueError, match="wmma"):
        gemm(dev((4, 4), np.float16), dev((4, 4), np.float16), variant="tiled", stream=s)
    with pytest.raises(ValueError, match="multiples of 8"):
        gemm(dev((16, 12), np.float16), dev((12, 16), np.float16), variant="wmma", stream=s)
    with pytest.raises(ValueError, match="M must be >= 1"):
        gemm(dev((0, 4)), dev((4, 4)), stream=s)
    with pytest.raises(ValueError, match="unknown variant"):
        gemm(dev((4, 4)), dev((4, 4)), variant="fast", stream=s)


def test_other_fronts_validate_before_touching_the_gpu():
    s = FakeStream()
    with pytest.raises(ValueError, match="multiples of 4"):
        small_tiles_gemm(dev((8, 6)), dev((6, 8)), stream=s)
    with pytest.raises(ValueError, match="float32"):
        cluster_gemm(dev((8, 8), np.float16), dev((8, 8), np.float16), stream=s)
    with pytest.raises(ValueError, match="1-D float32"):
        normalize(dev((4, 4)), stream=s)
    with pytest.raises(TypeError, match="stream is required"):
        normalize(dev((4,)), stream=None)


def test_cluster_grid_is_a_multiple_of_the_cluster_and_a_loads_shrink():
    assert cluster.grid_for(1000, 1000) == (16, 16)
    own = cluster.a_slice_loads(4096, 4096, 4096, share_a=False)
    shared = cluster.a_slice_loads(4096, 4096, 4096, share_a=True)
    assert own == cluster.CLUSTER * shared
