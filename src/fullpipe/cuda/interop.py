"""PyTorch and CuPy at fullpipe's edges, without copies.

Host side (what a pipeline takes and returns):

- :func:`host_view` turns a NumPy array, a torch CPU tensor (pinned or not) or any
  object with the buffer protocol into a NumPy array over the same memory, plus a
  :class:`HostKind` that remembers what it was. A tensor dtype NumPy lacks
  (bfloat16, the float8 types) is viewed as the unsigned integer of its size, with
  the torch dtype kept in the kind. Device arrays (CUDA tensors, CuPy arrays) are
  refused with a TypeError that says what to do: a pipeline moves host data.
- :func:`like_input` gives an output back as the kind the input was: a torch tensor
  over the NumPy output's memory (``torch.from_numpy``, no copy; pinned exactly when
  that memory is), with the input's torch dtype when the output has the input's
  carrier dtype (a bfloat16 input gives a bfloat16 output).

Device side (what a compute sees):

- :func:`torch_stream` / :func:`cupy_stream`: the library's stream object for a
  fullpipe (cuda.core) stream, for ``with torch.cuda.stream(s):`` /
  ``with cupy_stream(s):``. They wrap, they do not own: keep the fullpipe stream alive
  while they are used (the executor's streams live as long as the process).
- :func:`as_torch` / :func:`as_cupy`: zero-copy views of a :class:`DeviceArray`
  (bfloat16 included for torch).

Neither library is imported until one of these functions needs it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from .memory import DeviceArray

# Unsigned integer dtypes that carry the bytes of a dtype NumPy does not have (what
# the NumPy side sees), and the signed ones of the same size, which every PyTorch
# version converts to and from NumPy and CUDA arrays (uint16/32/64 are recent there).
_CARRIER_BY_ITEMSIZE = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32),
                        8: np.dtype(np.uint64)}
_SIGNED_BY_ITEMSIZE = {1: np.dtype(np.int8), 2: np.dtype(np.int16), 4: np.dtype(np.int32),
                       8: np.dtype(np.int64)}


@dataclasses.dataclass(frozen=True)
class HostKind:
    """What a host input was, so that the output can be given back the same way.

    ``library``: "numpy", "torch" or "buffer" (any other buffer-protocol object; its
    output is a NumPy array). ``torch_dtype``: the tensor's dtype (torch inputs).
    ``carrier``: the NumPy dtype the memory is viewed as, when it is not the tensor's
    own (bfloat16 -> uint16); None otherwise."""

    library: str
    torch_dtype: Any = None
    carrier: np.dtype | None = None

    @property
    def reinterpreted(self) -> bool:
        """True when the NumPy view's dtype is a stand-in (the data is e.g. bfloat16)."""
        return self.carrier is not None


NUMPY = HostKind("numpy")
BUFFER = HostKind("buffer")


_TENSOR_TYPES: set[type] = set()  # classes found to be torch tensors (run_batches asks for every batch)


def _is_torch_tensor(x: Any) -> bool:
    # No torch import: a tensor's class lives in a module named "torch..."
    t = type(x)
    if t in _TENSOR_TYPES:
        return True
    if t.__module__.split(".")[0] == "torch" and hasattr(x, "is_cuda") and hasattr(x, "numpy"):
        _TENSOR_TYPES.add(t)
        return True
    return False


def _device_array_error(x: Any, what: str) -> TypeError:
    name = f"{type(x).__module__.split('.')[0]}.{type(x).__name__}"
    return TypeError(
        f"{what} is a device array ({name}); a pipeline moves host data to the GPU and back. "
        "For data already on the GPU, call your compute on it directly; to stream it through "
        "a pipeline anyway, copy it to the host first (tensor.cpu(), cupy.asnumpy(a)).")


def host_view(x: Any, what: str = "input") -> tuple[np.ndarray, HostKind]:
    """A NumPy array over ``x``'s memory (no copy) and the kind ``x`` was.

    Takes NumPy arrays, torch CPU tensors and buffer-protocol objects. Raises
    TypeError for device arrays and anything else, ValueError for a non-contiguous
    tensor (it cannot be viewed as one block without a copy)."""
    if isinstance(x, np.ndarray):
        return x, NUMPY
    if _is_torch_tensor(x):
        return _torch_host_view(x, what)
    if hasattr(x, "__cuda_array_interface__") or hasattr(x, "__cuda_stream__"):
        raise _device_array_error(x, what)
    if hasattr(x, "__dlpack_device__"):
        dev_type = x.__dlpack_device__()[0]
        if int(dev_type) != 1:  # kDLCPU
            raise _device_array_error(x, what)
    try:
        return np.asarray(memoryview(x)), BUFFER
    except TypeError as exc:
        raise TypeError(
            f"{what} must be a NumPy array, a torch CPU tensor or an object with the buffer "
            f"protocol, got {type(x).__name__}") from exc


def host_views(xs: Sequence[Any], what: str) -> list[tuple[np.ndarray, HostKind]]:
    """:func:`host_view` of each of ``xs`` (``what``: their name with a ``{}`` for the
    position, "batch {}"). The common cases (NumPy arrays, contiguous torch CPU tensors of
    a dtype NumPy has) in one pass without a call each: run_batches views every batch and
    every output of a run before its first batch goes (58 views, 220 us a run of the
    bench's variable-length list on an H200 host, session 55)."""
    views = []
    append, ndarray, tensor_types = views.append, np.ndarray, _TENSOR_TYPES
    for i, x in enumerate(xs):
        t = type(x)
        if t is ndarray:
            append((x, NUMPY))
        elif t in tensor_types and (got := _torch_common_view(x)) is not None:
            append(got)
        else:
            append(host_view(x, what.format(i)))
    return views


_TORCH_KINDS: dict[Any, HostKind] = {}  # per torch dtype NumPy has: its HostKind (run_batches views each batch)


def _torch_common_view(t: Any) -> tuple[np.ndarray, HostKind] | None:
    """The common case in one call (run_batches views each batch): a contiguous CPU tensor of
    a dtype NumPy has and seen before, not requiring grad; None for any other. is_contiguous()
    (0.07 us) rather than the new view's flags.c_contiguous (up to 1.4 us here)."""
    kind = _TORCH_KINDS.get(t.dtype)
    if kind is not None and not t.requires_grad and t.is_contiguous():
        try:
            return t.numpy(), kind  # (refuses GPU tensors and a set conjugate or negation bit)
        except (TypeError, RuntimeError):
            pass
    return None


def _torch_host_view(t: Any, what: str) -> tuple[np.ndarray, HostKind]:
    got = _torch_common_view(t)
    if got is not None:
        return got
    if not t.is_cpu:
        raise _device_array_error(t, what)
    if not t.is_contiguous():
        raise ValueError(f"{what} is a non-contiguous tensor; pass {what}.contiguous()")
    if t.requires_grad:
        t = t.detach()  # a view: no copy, and .numpy() refuses tensors that require grad
    if t.is_conj() or t.is_neg():
        raise ValueError(f"{what} has a lazy conjugate/negation bit; pass {what}.resolve_conj().resolve_neg()")
    try:
        arr = t.numpy()
    except TypeError:  # a dtype NumPy lacks: bfloat16, float8_*, complex32 ...
        return _torch_carried_view(t, what)
    kind = _TORCH_KINDS.get(t.dtype)
    if kind is None:
        kind = _TORCH_KINDS[t.dtype] = HostKind("torch", torch_dtype=t.dtype)
    return arr, kind


def _torch_carried_view(t: Any, what: str) -> tuple[np.ndarray, HostKind]:
    """A tensor of a dtype NumPy lacks, viewed as the unsigned integer of its size."""
    import torch

    itemsize = t.element_size()
    carrier = _CARRIER_BY_ITEMSIZE.get(itemsize)
    if carrier is None:
        raise TypeError(f"{what} has dtype {t.dtype}, which NumPy cannot hold and fullpipe cannot carry")
    # view as the signed torch integer of the same size (always convertible), then unsigned
    signed = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[itemsize]
    arr = t.view(signed).numpy().view(carrier)  # t.view(dtype) and .view(carrier): no copies
    return arr, HostKind("torch", torch_dtype=t.dtype, carrier=carrier)


def like_input(out: np.ndarray, kind: HostKind, *, torch_dtype: Any = None) -> Any:
    """``out`` as the kind the input was (no copy): a NumPy array for NumPy and
    buffer inputs, a torch tensor for torch inputs.

    The tensor's dtype: ``torch_dtype`` if given; else the input's when the input was
    reinterpreted and ``out`` has its carrier dtype (bfloat16 in, bfloat16 out); else
    the one ``torch.from_numpy`` gives."""
    if not isinstance(out, np.ndarray):
        raise TypeError(f"expected the NumPy output array, got {type(out).__name__}")
    if kind.library != "torch":
        return out
    import torch

    if torch_dtype is None and kind.reinterpreted and out.dtype == kind.carrier:
        torch_dtype = kind.torch_dtype
    if torch_dtype is None:
        return torch.from_numpy(out)
    itemsize = torch.empty((), dtype=torch_dtype).element_size()
    if itemsize != out.dtype.itemsize:
        raise ValueError(f"cannot view a {out.dtype} output as {torch_dtype}: "
                         f"{out.dtype.itemsize} vs {itemsize} bytes per element")
    return torch.from_numpy(out.view(_SIGNED_BY_ITEMSIZE[itemsize])).view(torch_dtype)


# --------------------------------------------------------------------------- streams
def _stream_int(stream: Any) -> int:
    from .hotpath import handle_int

    return handle_int(stream)


def _stream_device_index(stream: Any, device: Any) -> int:
    """``device`` as an index (an int, torch.device, fullpipe or cuda.core Device), or,
    when None, the device ``stream`` belongs to (asked of the driver)."""
    from .device import _stream_device, device_index, ensure_current_for_stream

    if device is None:
        ensure_current_for_stream(stream)
        return _stream_device(stream)
    index = getattr(device, "index", None)  # torch.device("cuda:1").index, fullpipe Device.index
    return index if isinstance(index, int) else device_index(device)


def torch_stream(stream: Any, device: Any = None):
    """A ``torch.cuda.Stream`` for ``stream`` (a cuda.core/fullpipe stream, an int
    handle, or anything with ``__cuda_stream__``), for ``with torch.cuda.stream(...)``.

    Uses ``torch.cuda.get_stream_from_external`` (PyTorch >= 2.7, the API that replaces
    the ExternalStream class), else ``torch.cuda.ExternalStream``. ``device``: the
    stream's device index (asked of the driver when not given)."""
    import torch

    ptr = _stream_int(stream)
    index = _stream_device_index(stream, device)
    get = getattr(torch.cuda, "get_stream_from_external", None)
    if get is not None:
        return get(ptr, index)
    return torch.cuda.ExternalStream(ptr, device=index)  # PyTorch < 2.7


class _StreamProtocol:
    """A bare ``__cuda_stream__`` holder for an int handle."""

    def __init__(self, ptr: int):
        self._ptr = ptr

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self._ptr)


def cupy_stream(stream: Any, device: Any = None):
    """A ``cupy.cuda.Stream`` for ``stream`` (as for :func:`torch_stream`), for
    ``with cupy_stream(s):``. Uses ``cupy.cuda.Stream.from_external`` (the CUDA stream
    protocol, CuPy >= 14), else ``cupy.cuda.ExternalStream``."""
    import cupy

    ptr = _stream_int(stream)
    from_external = getattr(cupy.cuda.Stream, "from_external", None)
    if from_external is not None:
        return from_external(stream if hasattr(stream, "__cuda_stream__") else _StreamProtocol(ptr))
    return cupy.cuda.ExternalStream(ptr, _stream_device_index(stream, device))


# --------------------------------------------------------------------------- device arrays
def _torch_dtype_for(dtype: np.dtype, torch_dtype: Any):
    import torch

    if torch_dtype is not None:
        return torch_dtype
    if dtype.name == "bfloat16":  # ml_dtypes' bfloat16
        return torch.bfloat16
    return None


def as_torch(array: DeviceArray, *, torch_dtype: Any = None):
    """A torch CUDA tensor over ``array``'s memory (no copy; it keeps ``array`` alive).

    ``torch_dtype`` reinterprets the elements (same size): e.g. a uint16 DeviceArray
    that holds bfloat16 data, ``as_torch(a, torch_dtype=torch.bfloat16)``. An
    ``ml_dtypes.bfloat16`` DeviceArray becomes a bfloat16 tensor by itself."""
    import torch

    if not isinstance(array, DeviceArray):
        raise TypeError(f"as_torch takes a fullpipe DeviceArray, got {type(array).__name__}")
    want = _torch_dtype_for(array.dtype, torch_dtype)
    if want is None:
        return torch.as_tensor(array, device=f"cuda:{array.device_index}")
    if torch.empty((), dtype=want).element_size() != array.dtype.itemsize:
        raise ValueError(f"cannot view {array.dtype} as {want}: the element sizes differ")
    carrier = _SIGNED_BY_ITEMSIZE.get(array.dtype.itemsize)
    if carrier is None:
        raise TypeError(f"cannot reinterpret {array.dtype} ({array.dtype.itemsize} bytes) as {want}")
    view = DeviceArray(array.ptr, array.shape, carrier, owner=array, device_index=array.device_index)
    return torch.as_tensor(view, device=f"cuda:{array.device_index}").view(want)


def cupy_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype CuPy holds ``dtype``'s bytes as: itself, or for one CuPy has not (NumPy's
    bfloat16, records) the unsigned integer of its size."""
    if dtype.name == "bfloat16" or dtype.kind == "V":
        return _CARRIER_BY_ITEMSIZE[dtype.itemsize]
    return dtype


def as_cupy(array: DeviceArray):
    """A CuPy array over ``array``'s memory (no copy; it keeps ``array`` alive). CuPy has
    no bfloat16: such data comes out as uint16, the bits unchanged."""
    import cupy

    if not isinstance(array, DeviceArray):
        raise TypeError(f"as_cupy takes a fullpipe DeviceArray, got {type(array).__name__}")
    dtype = cupy_dtype(array.dtype)
    mem = cupy.cuda.UnownedMemory(array.ptr, array.nbytes, array, array.device_index)
    return cupy.ndarray(array.shape, dtype, cupy.cuda.MemoryPointer(mem, 0))
