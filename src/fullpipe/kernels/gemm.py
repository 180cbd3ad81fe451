"""The GEMM front: ``C = A @ B`` with one of the level-2 pipelining techniques.

    c = fullpipe.kernels.gemm(a, b, variant="double_buffer", stages=3, stream=s)

Layouts: A is (M, K), B is (K, N), both C-contiguous (row-major); C is (M, N)
float32, row-major. Inputs are PyTorch CUDA tensors, CuPy arrays or fullpipe
DeviceArrays; the result has the kind of ``a`` (or is ``out``).

Variants (one .cu source each, beside this file):

==================  ==========  =================================================
variant             inputs      technique
==================  ==========  =================================================
tiled               float32     shared tiles, load -> __syncthreads -> compute
double_buffer       float32     cuda::pipeline ring of 2/3/4 stages (memcpy_async)
warp_specialized    float32     loader warp -> compute warps -> storer warp
wmma                fp16/bf16   tensor cores (wmma) fed by a 3/4-stage cp.async ring
==================  ==========  =================================================

Any M, N, K >= 1 for the float32 variants (16-byte copies when K and N are
multiples of 4 and the pointers 16-byte aligned, element copies otherwise).
``wmma`` needs K and N multiples of 8 and 16-byte aligned pointers.
The kernel is enqueued on ``stream`` and the call returns at once.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from ..cuda import compiler
from ..cuda.launch import launch
from ..cuda.streams import as_core_stream
from ._operands import Operand, operand, output

FP32_TILE = 128  # block tile of the fp32 kernels (128 x 128)
FP32_STAGE_BYTES = (128 * 20 + 16 * 128) * 4  # one ring buffer: As[128][20] + Bs[16][128] floats
WS_EPILOGUE_BYTES = 128 * 132 * 4  # warp_specialized: the C tile handed to the storer warp
WS_THREADS = 320  # 1 loader warp + 8 compute warps + 1 storer warp
WMMA_TILE = (128, 256)
WMMA_STAGE_BYTES = (128 * 40 + 32 * 264) * 2  # As[128][40] + Bs[32][264] 16-bit elements


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    source: str  # package-relative .cu path
    dtypes: tuple[str, ...]
    stages: tuple[int, ...]  # allowed stage counts (() = not a pipeline)
    default_stages: int | None


VARIANTS: dict[str, Variant] = {
    "tiled": Variant("tiled", "kernels/gemm_tiled.cu", ("float32",), (), None),
    "double_buffer": Variant("double_buffer", "kernels/gemm_double_buffer.cu", ("float32",), (2, 3, 4), 3),
    "warp_specialized": Variant(
        "warp_specialized", "kernels/gemm_warp_specialized.cu", ("float32",), (2, 3, 4), 4
    ),
    "wmma": Variant("wmma", "kernels/gemm_wmma.cu", ("float16", "bfloat16"), (3, 4), 4),
}


@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    """Everything about one launch except the pointers: testable without a GPU."""

    source: str
    kernel: str
    grid: tuple[int, ...]
    block: int
    shared_mem: int


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def plan(
    variant: str,
    m: int,
    n: int,
    k: int,
    dtype: str,
    *,
    stages: int | None = None,
    aligned: bool = True,
    sm_count: int = 132,
) -> LaunchPlan:
    """Choose the kernel and launch shape, or raise ValueError naming the constraint.

    ``aligned``: all pointers are 16-byte aligned. ``sm_count`` sizes persistent grids.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    v = VARIANTS[variant]
    for name, dim in (("M", m), ("N", n), ("K", k)):
        if not isinstance(dim, (int, np.integer)) or dim < 1:
            raise ValueError(f"{name} must be >= 1 (got {dim}): empty matrices have nothing to multiply")
        if dim >= 2**31:
            raise ValueError(f"{name} = {dim} does not fit the kernels' 32-bit indices")
    if dtype not in v.dtypes:
        raise ValueError(
            f"variant {variant!r} takes {' or '.join(v.dtypes)} inputs, got {dtype}; "
            + ("use variant='wmma' for float16/bfloat16" if dtype in ("float16", "bfloat16") else
               "convert the inputs (e.g. a.float()) or pick another variant")
        )
    if stages is None:
        stages = v.default_stages
    elif not v.stages:
        raise ValueError(f"variant {variant!r} has no pipeline stages; leave stages=None")
    elif stages not in v.stages:
        raise ValueError(f"stages must be one of {v.stages} for variant {variant!r}, got {stages!r}")

    if variant == "wmma":
        if k % 8 or n % 8:
            raise ValueError(
                f"variant 'wmma' copies 16-byte chunks of 8 elements: K and N must be multiples of 8 "
                f"(got K={k}, N={n}); pad the matrices with zeros"
            )
        if not aligned:
            raise ValueError("variant 'wmma' needs 16-byte aligned A, B and out (a sliced view is not); copy it")
        tag = "f16" if dtype == "float16" else "bf16"
        tiles = _ceil(m, WMMA_TILE[0]) * _ceil(n, WMMA_TILE[1])
        return LaunchPlan(v.source, f"gemm_wmma_{tag}_s{stages}", (tiles,), 256, stages * WMMA_STAGE_BYTES)

    vec = aligned and k % 4 == 0 and n % 4 == 0
    suffix = "" if vec else "_scalar"
    grid2d = (_ceil(n, FP32_TILE), _ceil(m, FP32_TILE))
    if variant == "tiled":
        return LaunchPlan(v.source, f"gemm_tiled_f32{suffix}", grid2d, 256, 0)
    if variant == "double_buffer":
        return LaunchPlan(v.source, f"gemm_double_buffer_s{stages}{suffix}", grid2d, 256, stages * FP32_STAGE_BYTES)
    # warp_specialized: persistent, one block per SM walking the tiles
    tiles = grid2d[0] * grid2d[1]
    return LaunchPlan(
        v.source,
        f"gemm_warp_specialized_s{stages}{suffix}",
        (min(tiles, sm_count),),
        WS_THREADS,
        stages * FP32_STAGE_BYTES + WS_EPILOGUE_BYTES,
    )


@functools.lru_cache(maxsize=None)
def _device_info(index: int) -> tuple[str, int]:
    from ..cuda.device import Device

    dev = Device(index)
    return compiler.default_arch(dev), dev.facts.sm_count


@functools.lru_cache(maxsize=None)
def _module(source: str, arch: str):
    return compiler.compile_package_kernel(source, arch=arch)


def kernel_for(p: LaunchPlan, device_index: int = 0):
    arch, _ = _device_info(device_index)
    return _module(p.source, arch).kernel(p.kernel)


def _check_pair(a: Operand, b: Operand) -> tuple[int, int, int]:
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise ValueError(f"a and b must be 2-D matrices, got shapes {a.shape} and {b.shape}")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"inner dimensions differ: a is {a.shape}, b is {b.shape} (a.shape[1] must equal b.shape[0])")
    if a.dtype != b.dtype:
        raise ValueError(f"a and b must have the same dtype, got {a.dtype} and {b.dtype}")
    if a.device_index != b.device_index:
        raise ValueError(f"a and b are on different GPUs ({a.device_index} and {b.device_index})")
    return m, n, k


def _float32_cp_async_operands(a: Any, b: Any, out: Any, stream: Any, who: str, *, nonempty: bool = False):
    """Checked operands of a float32 kernel that copies 16-byte chunks with cp.async:
    returns (A, B, out, C, core stream, m, n, k). Everything is checked before the
    output is allocated, except its alignment."""
    if stream is None:
        raise TypeError("stream is required")
    A, B = operand(a, "a"), operand(b, "b")
    m, n, k = _check_pair(A, B)
    if A.dtype != "float32":
        raise ValueError(f"{who} takes float32 inputs, got {A.dtype}")
    if nonempty and min(m, n, k) < 1:
        raise ValueError(f"M, N, K must be >= 1, got {m}, {n}, {k}")
    if k % 4 or n % 4:
        raise ValueError(f"K and N must be multiples of 4 (16-byte copies), got K={k}, N={n}")
    s = as_core_stream(stream)
    out, C = output(out, A, (m, n), s)
    if any(x.ptr % 16 for x in (A, B, C)):
        raise ValueError("a, b and out must be 16-byte aligned (a sliced view may not be): copy them")
    return A, B, out, C, s, m, n, k


def gemm(
    a: Any,
    b: Any,
    *,
    variant: str = "double_buffer",
    stages: int | None = None,
    stream: Any,
    out: Any = None,
) -> Any:
    """``out = a @ b`` (float32), enqueued on ``stream``; returns ``out``.

    ``stream``: a cuda.core Stream or any object with ``__cuda_stream__`` (the
    result is ready once the stream reaches this point). ``out``: an (M, N)
    float32 C-contiguous device array; when None, one of the kind of ``a`` is
    allocated.
    """
    if stream is None:
        raise TypeError("stream is required: pass the stream to enqueue the kernel on (fullpipe.cuda.create_stream)")
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    A, B = operand(a, "a"), operand(b, "b")
    m, n, k = _check_pair(A, B)
    # Validate everything that does not need the output before allocating it.
    plan(variant, m, n, k, A.dtype, stages=stages, aligned=True)
    s = as_core_stream(stream)
    out, C = output(out, A, (m, n), s)
    aligned = all(x.ptr % 16 == 0 for x in (A, B, C))
    _, sm_count = _device_info(A.device_index)
    p = plan(variant, m, n, k, A.dtype, stages=stages, aligned=aligned, sm_count=sm_count)
    launch(
        s,
        kernel_for(p, A.device_index),
        p.grid,
        p.block,
        np.uint64(A.ptr),
        np.uint64(B.ptr),
        np.uint64(C.ptr),
        np.int32(m),
        np.int32(n),
        np.int32(k),
        shared_mem=p.shared_mem,
        device_index=A.device_index,
    )
    return out


def flops(m: int, n: int, k: int) -> float:
    return 2.0 * m * n * k
