"""Device-array operands for the kernels: what the Python fronts accept and check.

Accepted: PyTorch CUDA tensors, CuPy arrays, fullpipe DeviceArrays (and anything
with DLPack / ``__cuda_array_interface__``). PyTorch tensors are read directly
(pointer, shape, dtype) so that bfloat16 works without the optional ml_dtypes
package that NumPy-dtype based views need for it.
"""

from __future__ import annotations

import dataclasses
import functools
import weakref
from typing import Any

import numpy as np

from ..cuda import compiler
from ..cuda.device import Device
from ..cuda.memory import DeviceArray, as_device_array
from ..cuda.streams import stream_from_handle

_TORCH_DTYPES = {"torch.float32": "float32", "torch.float16": "float16", "torch.bfloat16": "bfloat16"}


@dataclasses.dataclass
class Operand:
    """One device array as the kernels see it."""

    obj: Any
    ptr: int
    shape: tuple[int, ...]
    dtype: str  # "float32", "float16", "bfloat16", or another NumPy dtype name
    device_index: int
    kind: str  # "torch", "cupy" or "fullpipe"
    # a 2-D array given as the transpose of a C-contiguous one (``w.T`` of an (N, K)
    # weight): ``shape`` is the array's own, ``ptr`` the row-major (N, K) matrix's
    transposed: bool = False
    # a 2-D output whose rows lie ``pitch`` elements apart, more than its columns (the
    # (M, N) view of a matrix of padded rows: hopper_gemm's result for N not a multiple of 8);
    # 0: C-contiguous
    pitch: int = 0


_torch_tensor_types: "weakref.WeakKeyDictionary[type, bool]" = weakref.WeakKeyDictionary()  # (asked once a
# type: a small product's call is ~20 us)


def _is_torch_tensor(x: Any) -> bool:
    t = type(x)
    known = _torch_tensor_types.get(t)
    if known is None:
        known = _torch_tensor_types[t] = (t.__module__.startswith("torch") and hasattr(x, "data_ptr")
                                          and hasattr(x, "is_cuda"))
    return known


_torch_dtype_names: dict[Any, str] = {}  # torch dtype -> name (str(dtype) costs a few us per operand)


def _torch_dtype_name(dtype: Any) -> str:
    name = _torch_dtype_names.get(dtype)
    if name is None:
        name = _torch_dtype_names[dtype] = _TORCH_DTYPES.get(str(dtype), str(dtype).replace("torch.", ""))
    return name


_NOR_TRANSPOSED = ", nor the transpose of a contiguous matrix (w.T)"


def operand(x: Any, name: str, *, transposed_ok: bool = False, pitched_ok: bool = False) -> Operand:
    """Describe ``x`` (argument ``name``) or raise TypeError/ValueError saying what to fix.
    ``transposed_ok``: the caller also takes a 2-D ``x`` that is the transpose of a
    C-contiguous array (``w.T``; ``Operand.transposed``); ``pitched_ok``: a 2-D torch or CuPy
    ``x`` whose rows are contiguous but lie further apart than its columns (``Operand.pitch``)."""
    if isinstance(x, np.ndarray):
        raise TypeError(f"{name} is a NumPy (host) array: copy it to the GPU first (torch/cupy/fullpipe device array)")
    if _is_torch_tensor(x):
        if not x.is_cuda:
            raise TypeError(f"{name} is a CPU tensor: move it to the GPU first (tensor.cuda())")
        if not x.is_contiguous():
            # (x.t().is_contiguous() read from the strides: x.t() would make a view, ~2 us)
            if transposed_ok and x.dim() == 2 and x.stride() == (1, x.shape[0]):
                return Operand(x, x.data_ptr(), tuple(x.shape), _torch_dtype_name(x.dtype), x.get_device(), "torch",
                               transposed=True)
            pitch = row_pitch(x) if pitched_ok else 0
            if pitch:
                return Operand(x, x.data_ptr(), tuple(x.shape), _torch_dtype_name(x.dtype), x.get_device(), "torch",
                               pitch=pitch)
            raise ValueError(f"{name} is not contiguous (row-major){_NOR_TRANSPOSED if transposed_ok else ''}: "
                             "call .contiguous() first")
        return Operand(x, x.data_ptr(), tuple(x.shape), _torch_dtype_name(x.dtype), x.get_device(), "torch")
    pitch = row_pitch(x) if pitched_ok and type(x).__module__.startswith("cupy") else 0
    if pitch:
        return Operand(x, int(x.data.ptr), tuple(x.shape), np.dtype(x.dtype).name, int(x.device.id), "cupy",
                       pitch=pitch)
    transposed = transposed_ok and _is_transposed_view(x)
    try:
        arr = as_device_array(x.T if transposed else x)
    except NotImplementedError as exc:  # e.g. bfloat16 through DLPack without ml_dtypes
        raise TypeError(f"{name}: cannot read its dtype ({exc}); pass a torch tensor or install ml_dtypes") from exc
    kind = "fullpipe" if isinstance(x, DeviceArray) else ("cupy" if type(x).__module__.startswith("cupy") else "other")
    shape = tuple(reversed(arr.shape)) if transposed else arr.shape
    return Operand(x, arr.ptr, shape, np.dtype(arr.dtype).name if arr.dtype.kind != "V" else str(arr.dtype),
                   arr.device_index, kind, transposed)


def row_pitch(x: Any) -> int:
    """The elements from one row of the 2-D array ``x`` to the next where its rows are
    contiguous but lie further apart than its columns (``y[:, :n]`` of a C-contiguous ``y``:
    the (M, N) view of a matrix of padded rows); 0 for any other array. Torch's strides are
    in elements, CuPy's and NumPy's in bytes."""
    shape = getattr(x, "shape", ())
    if len(shape) != 2:
        return 0
    if callable(getattr(x, "stride", None)):
        (s0, s1), item = x.stride(), 1
    else:
        strides, item = getattr(x, "strides", None), getattr(getattr(x, "dtype", None), "itemsize", 0)
        if strides is None or len(strides) != 2 or not item:
            return 0
        s0, s1 = strides
    if s1 != item or s0 <= shape[1] * item or s0 % item:
        return 0
    return s0 // item


def _is_transposed_view(x: Any) -> bool:
    """A 2-D array (CuPy or another with ``.T`` and ``.flags``) that is Fortran- but not
    C-contiguous: the transpose of a C-contiguous one."""
    flags = getattr(x, "flags", None)
    return (getattr(x, "ndim", 0) == 2 and flags is not None and bool(getattr(flags, "f_contiguous", False))
            and not bool(getattr(flags, "c_contiguous", True)))


_torch_devices: dict[int, Any] = {}


def _torch_device(torch: Any, index: int) -> Any:
    """``torch.device("cuda", index)``, made once (~1 us a call)."""
    d = _torch_devices.get(index)
    if d is None:
        d = _torch_devices[index] = torch.device("cuda", index)
    return d


def current_stream_handle(ref: Operand) -> int | None:
    """The handle of the stream PyTorch or CuPy works on now on ``ref``'s device (where
    their arrays are allocated and their calls enqueued), or None for other arrays."""
    if ref.kind == "torch":
        import torch

        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # (0.2 us; torch.cuda.current_stream()
        if raw is not None:                                           # makes a Stream object: 3-5 us)
            return int(raw(ref.device_index))
        return int(torch.cuda.current_stream(ref.device_index).cuda_stream)
    if ref.kind == "cupy":
        import cupy

        with cupy.cuda.Device(ref.device_index):
            return int(cupy.cuda.get_current_stream().ptr)
    return None


def empty_like_kind(ref: Operand, shape: tuple[int, ...], dtype: str, stream: Any) -> tuple[Any, Operand]:
    """A new output array of the same kind as ``ref`` (torch -> torch, cupy -> cupy,
    otherwise a fullpipe DeviceArray from the device's memory resource on ``stream``).
    ``stream``: the cuda.core Stream the kernel goes on, or its int handle.

    Torch and CuPy allocate in stream order on *their* current stream, so ``stream``
    is made to wait for that stream first where it is another one: the kernel never
    writes memory that their earlier work may still use.
    """
    handle = stream if isinstance(stream, int) else int(stream.handle)

    def core() -> Any:  # ``stream`` as a cuda.core Stream
        return stream_from_handle(stream) if isinstance(stream, int) else stream

    def wait_for(current: int) -> None:
        if current != handle:
            core().wait(stream_from_handle(current))

    if ref.kind == "torch":
        import torch

        out = torch.empty(shape, dtype=getattr(torch, dtype), device=_torch_device(torch, ref.device_index))
        wait_for(current_stream_handle(ref))
        # (described as operand() would, from what is known: a small product's call is ~15 us)
        return out, Operand(out, out.data_ptr(), tuple(shape), dtype, ref.device_index, "torch")
    if ref.kind == "cupy":
        import cupy

        with cupy.cuda.Device(ref.device_index):
            out = cupy.empty(shape, dtype=dtype)
            wait_for(current_stream_handle(ref))
    else:
        from cuda.core import Device as CoreDevice

        from ..cuda.memory import device_empty

        out = device_empty(shape, dtype, core(), CoreDevice(ref.device_index).memory_resource)
    return out, operand(out, "out")


def output(out: Any, ref: Operand, shape: tuple[int, int], stream: Any) -> tuple[Any, Operand]:
    """The float32 result array: a new one of ``ref``'s kind (torch, cupy or fullpipe)
    when ``out`` is None, else ``out`` checked for shape, dtype and device."""
    if out is None:
        return empty_like_kind(ref, shape, "float32", stream)
    C = operand(out, "out")
    if C.shape != shape or C.dtype != "float32":
        raise ValueError(f"out must be a {shape} float32 array, got {C.shape} {C.dtype}")
    if C.device_index != ref.device_index:
        raise ValueError("out must be on the same GPU as a and b")
    return out, C


def matmul_shape(a: Operand, b: Operand) -> tuple[int, int, int]:
    """(M, N, K) of ``a @ b``, or a ValueError saying what does not match."""
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


@functools.lru_cache(maxsize=None)
def arch_and_sm_count(index: int) -> tuple[str, int]:
    """(arch, SM count) of a device, looked up once per process: collecting a Device's
    facts queries the driver, NVML and NVRTC, far too slow for every gemm() call."""
    dev = Device(index)
    return compiler.default_arch(dev), dev.facts.sm_count
