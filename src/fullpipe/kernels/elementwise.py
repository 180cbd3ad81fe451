"""The decoder stack's elementwise pieces as fused kernels (elementwise.cu): one launch
each, bfloat16 or float16 in and out, float32 math in the order of the PyTorch
functions of :mod:`fullpipe.models.elementwise` (their reference).

    rms_norm(x, weight, eps, out, stream)                  # out = x / sqrt(mean(x^2) + eps) * weight
    residual_rms_norm(x, proj, weight, eps, out, stream)   # x += proj; out = rms_norm(x)
    rope_qkv(qkv, positions, q, k, v, heads, kv_heads, head_dim, base, stream)
    swiglu(gate_up, out, stream)                           # out = silu(gate) * up

Shapes: ``x``/``out``/``proj`` ``[rows, width]`` with ``width`` a multiple of 8 and at most
4096 (one warp per row holds it in registers), ``weight`` ``[width]``; ``qkv`` ``[T, (heads
+ 2 kv_heads) * head_dim]`` (Q, K, V columns in that order), ``positions`` int32 ``[T]``,
``q`` ``[T, heads, head_dim]``, ``k`` and ``v`` ``[T, kv_heads, head_dim]``, ``head_dim``
a multiple of 16 up to 128; ``gate_up`` ``[T, 2F]`` (gate columns first), ``out``
``[T, F]``, F a multiple of 8. Every array contiguous, 16-byte aligned, on one GPU.

These run on the stack's per-layer hot path, where the host's time to enqueue is the
limit (issue 18/19), so the fronts allocate nothing: outputs are given, and the launch
is a ctypes cuLaunchKernel with argument storage packed once per thread
(:mod:`fullpipe.cuda.hotpath`). ``stream``: a cuda.core Stream, an object with
``__cuda_stream__`` or an int handle; None: PyTorch's current stream. The kernel runs in
the context of the arrays' device (made current in this thread if it is not).

    python -m fullpipe.models.elementwise --selftest    # small checked runs vs PyTorch (sanitizers)
"""

from __future__ import annotations

import ctypes
from typing import Any

from ._launcher import KernelSet

SOURCE = "kernels/elementwise.cu"
DTYPES = {"bfloat16": "bf16", "float16": "f16"}
VEC = 8  # elements per 16-byte vector
NORM_WARPS = 4  # rows per block of the norm kernels (elementwise.cu)
NORM_SLOTS = (1, 2, 4, 8, 16)  # register vectors per lane: the norm kernels' builds
MAX_NORM_WIDTH = 32 * VEC * NORM_SLOTS[-1]
POINTWISE_THREADS = 256
MAX_HEAD_DIM = 128  # rope_qkv's shared inverse-frequency table holds head_dim / 2 entries
BLOCKS_PER_SM = 32  # grid cap of the grid-stride kernels (rope_qkv, swiglu)

_u64, _i32, _f32 = ctypes.c_uint64, ctypes.c_int32, ctypes.c_float
_SIGNATURES = {
    "rms_norm": [_u64, _u64, _u64, _i32, _i32, _f32],
    "residual_rms_norm": [_u64, _u64, _u64, _u64, _i32, _i32, _f32],
    "rope_qkv": [_u64, _u64, _u64, _u64, _u64, _i32, _i32, _i32, _i32, _f32],
    "swiglu": [_u64, _u64, _i32, _i32],
}


def norm_slots(width: int) -> int:
    """Register vectors per lane for a row of ``width`` elements: the smallest build
    whose warp holds the whole row."""
    for v in NORM_SLOTS:
        if 32 * VEC * v >= width:
            return v
    raise ValueError(f"width {width} is above {MAX_NORM_WIDTH}, the widest row one warp holds")


def kernel_names() -> list[str]:
    """Every kernel elementwise.cu exports."""
    names = []
    for tag in DTYPES.values():
        names += [f"{kind}_{tag}_v{v}" for kind in ("rms_norm", "residual_rms_norm") for v in NORM_SLOTS]
        names += [f"rope_qkv_{tag}", f"swiglu_{tag}"]
    return names


# --------------------------------------------------------------------------- arguments
_TORCH: dict[Any, str] = {}  # torch dtype -> "bfloat16" / "float16" / "int32" (filled on first use)
_tensor_type: Any = None  # torch.Tensor once one was seen (torch is optional: never imported here)


def _torch_dtypes() -> dict[Any, str]:
    if not _TORCH:
        import torch

        _TORCH.update({torch.bfloat16: "bfloat16", torch.float16: "float16", torch.int32: "int32"})
    return _TORCH


def _array(x: Any, name: str) -> tuple[int, tuple[int, ...], str, int]:
    """(pointer, shape, dtype name, device index; -1 on the CPU) of an array argument.
    PyTorch tensors are read directly (the cheap path); CuPy and fullpipe arrays through
    kernels._operands."""
    global _tensor_type
    if type(x) is _tensor_type or (type(x).__module__.startswith("torch") and hasattr(x, "get_device")):
        if not x.is_contiguous():
            raise ValueError(f"{name} is not contiguous (row-major): pass a contiguous tensor")
        dtype = _TORCH.get(x.dtype) or _torch_dtypes().get(x.dtype) or str(x.dtype).replace("torch.", "")
        _tensor_type = type(x)  # the next call's check is one identity test
        return x.data_ptr(), x.shape, dtype, x.get_device()  # torch.Size compares equal to a tuple
    from ._operands import operand

    op = operand(x, name)
    return op.ptr, op.shape, op.dtype, op.device_index


def _check_aligned(name: str, ptr: int) -> None:
    if ptr % 16:
        raise ValueError(f"{name} must be 16-byte aligned (a sliced view may not be): copy it")


def _check_same(name: str, info: tuple, shape: tuple[int, ...], dtype: str, dev: int) -> None:
    _, s, dt, d = info
    if s != shape or dt != dtype:
        raise ValueError(f"{name} must be a {shape} {dtype} array, got {tuple(s)} {dt}")
    if d != dev:
        raise ValueError(f"{name} is on device {d}, the other arrays on device {dev}: put them on one GPU")
    _check_aligned(name, info[0])


def _check_device(name: str, dev: int) -> None:
    if dev < 0:
        raise ValueError(f"{name} is on the CPU: the fused elementwise kernels run on a GPU")


def _check_dtype(name: str, dtype: str) -> None:
    if dtype not in DTYPES:
        raise ValueError(f"{name} must be bfloat16 or float16, got {dtype}")


# --------------------------------------------------------------------------- launching
_KERNELS = KernelSet(SOURCE, kernel_names(), _SIGNATURES)
_launch = _KERNELS.launch


def _pointwise_grid(dev: int, items: int) -> int:
    return max(1, min(-(-items // POINTWISE_THREADS), _KERNELS.on(dev).sm_count * BLOCKS_PER_SM))


# --------------------------------------------------------------------------- the fronts
def _norm_args(x: Any, weight: Any) -> tuple[tuple, int, int, int, str, int]:
    """(x's array info, weight's pointer, rows, width, dtype, device) of a norm's inputs."""
    xi = _array(x, "x")
    ptr, shape, dtype, dev = xi
    if len(shape) != 2:
        raise ValueError(f"x must be 2-D [rows, width], got shape {tuple(shape)}")
    _check_dtype("x", dtype)
    rows, width = shape
    if width % VEC or not 0 < width <= MAX_NORM_WIDTH:
        raise ValueError(f"width must be a multiple of {VEC} from {VEC} to {MAX_NORM_WIDTH}, got {width}")
    _check_aligned("x", ptr)
    wi = _array(weight, "weight")
    _check_same("weight", wi, (width,), dtype, dev)
    return xi, wi[0], rows, width, dtype, dev


def rms_norm(x: Any, weight: Any, eps: float, out: Any, stream: Any = None) -> Any:
    """``out = x / sqrt(mean(x^2) + eps) * weight`` per row of ``x`` ``[rows, width]``;
    returns ``out``."""
    xi, wptr, rows, width, dtype, dev = _norm_args(x, weight)
    oi = _array(out, "out")
    _check_same("out", oi, (rows, width), dtype, dev)
    _check_device("x", dev)
    if rows:
        v = norm_slots(width)
        _launch("rms_norm", f"rms_norm_{DTYPES[dtype]}_v{v}", dev, -(-rows // NORM_WARPS), NORM_WARPS * 32, stream,
                xi[0], wptr, oi[0], rows, width // VEC, eps)
    return out


def residual_rms_norm(x: Any, proj: Any, weight: Any, eps: float, out: Any, stream: Any = None) -> Any:
    """``x += proj`` (rounded to x's dtype, as ``x.add_(proj)``), then ``out =
    rms_norm(x)`` of the updated rows: one launch for the residual add and the next
    norm; returns ``out``."""
    xi, wptr, rows, width, dtype, dev = _norm_args(x, weight)
    pi = _array(proj, "proj")
    _check_same("proj", pi, (rows, width), dtype, dev)
    oi = _array(out, "out")
    _check_same("out", oi, (rows, width), dtype, dev)
    _check_device("x", dev)
    if rows:
        v = norm_slots(width)
        _launch("residual_rms_norm", f"residual_rms_norm_{DTYPES[dtype]}_v{v}", dev, -(-rows // NORM_WARPS),
                NORM_WARPS * 32, stream, xi[0], pi[0], wptr, oi[0], rows, width // VEC, eps)
    return out


def rope_qkv(qkv: Any, positions: Any, q_out: Any, k_out: Any, v_out: Any, heads: int, kv_heads: int,
             head_dim: int, base: float, stream: Any = None) -> None:
    """From the fused projection's output ``qkv`` ``[T, (heads + 2 kv_heads) *
    head_dim]``: ``q_out`` and ``k_out`` rotated by each token's position ("rotate
    half": element i pairs with i + head_dim/2, angle ``position * base^(-2i/head_dim)``
    in float32 as :func:`fullpipe.models.elementwise.rope_tables` computes it), ``v_out``
    copied."""
    if not (isinstance(heads, int) and isinstance(kv_heads, int) and heads >= 1 and kv_heads >= 1):
        raise ValueError(f"heads and kv_heads must be positive ints, got {heads!r} and {kv_heads!r}")
    if not isinstance(head_dim, int) or head_dim % (2 * VEC) or not 0 < head_dim <= MAX_HEAD_DIM:
        raise ValueError(f"head_dim must be a multiple of {2 * VEC} up to {MAX_HEAD_DIM}, got {head_dim!r}")
    if not base > 0:
        raise ValueError(f"base must be > 0, got {base!r}")
    ptr, shape, dtype, dev = _array(qkv, "qkv")
    _check_dtype("qkv", dtype)
    cols = (heads + 2 * kv_heads) * head_dim
    if len(shape) != 2 or shape[1] != cols:
        raise ValueError(f"qkv must be [tokens, (heads + 2 kv_heads) * head_dim] = [tokens, {cols}], "
                         f"got {tuple(shape)}")
    _check_aligned("qkv", ptr)
    tokens = shape[0]
    pos = _array(positions, "positions")
    if pos[1] != (tokens,) or pos[2] != "int32":
        raise ValueError(f"positions must be a ({tokens},) int32 array, got {tuple(pos[1])} {pos[2]}")
    if pos[3] != dev:
        raise ValueError(f"positions is on device {pos[3]}, qkv on device {dev}: put them on one GPU")
    qi, ki, vi = _array(q_out, "q_out"), _array(k_out, "k_out"), _array(v_out, "v_out")
    _check_same("q_out", qi, (tokens, heads, head_dim), dtype, dev)
    _check_same("k_out", ki, (tokens, kv_heads, head_dim), dtype, dev)
    _check_same("v_out", vi, (tokens, kv_heads, head_dim), dtype, dev)
    _check_device("qkv", dev)
    items = tokens * ((heads + kv_heads) * head_dim // 2 + kv_heads * head_dim) // VEC
    if items >= 2**31:
        raise ValueError(f"qkv is too large for one launch ({tokens} tokens)")
    if tokens:
        _launch("rope_qkv", f"rope_qkv_{DTYPES[dtype]}", dev, _pointwise_grid(dev, items), POINTWISE_THREADS, stream,
                ptr, pos[0], qi[0], ki[0], vi[0], tokens, heads, kv_heads, head_dim, base)


def swiglu(gate_up: Any, out: Any, stream: Any = None) -> Any:
    """``out = silu(gate) * up`` of ``gate_up`` ``[T, 2F]`` (gate columns first) into
    ``out`` ``[T, F]``; returns ``out``."""
    ptr, shape, dtype, dev = _array(gate_up, "gate_up")
    _check_dtype("gate_up", dtype)
    if len(shape) != 2 or shape[1] % (2 * VEC) or not shape[1]:
        raise ValueError(f"gate_up must be [tokens, 2 F] with F a positive multiple of {VEC}, got shape {tuple(shape)}")
    _check_aligned("gate_up", ptr)
    tokens, ffn = shape[0], shape[1] // 2
    oi = _array(out, "out")
    _check_same("out", oi, (tokens, ffn), dtype, dev)
    _check_device("gate_up", dev)
    items = tokens * ffn // VEC
    if items >= 2**31:
        raise ValueError(f"gate_up is too large for one launch ({tokens} x {2 * ffn})")
    if tokens:
        _launch("swiglu", f"swiglu_{DTYPES[dtype]}", dev, _pointwise_grid(dev, items), POINTWISE_THREADS, stream,
                ptr, oi[0], tokens, ffn)
    return out


def ulp(x: Any) -> Any:
    """One unit in the last place of each element of ``x`` (a bf16/fp16 torch tensor),
    as float32: the gap between two neighbouring values of its dtype at its magnitude."""
    import torch

    info = torch.finfo(x.dtype)
    mant = {torch.bfloat16: 7, torch.float16: 10}[x.dtype]
    a = x.float().abs().clamp_min(info.tiny)
    return torch.exp2(torch.floor(torch.log2(a)) - mant).clamp_min(info.smallest_normal * 2.0 ** -mant)


def within_one_ulp(got: Any, want: Any) -> bool:
    """Whether every element of ``got`` is ``want`` or a neighbour of it in their dtype:
    what rounding the same float32 math, done in another order, to bf16/fp16 can give."""
    return bool(((got.float() - want.float()).abs() <= ulp(want)).all())

