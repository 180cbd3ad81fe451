"""Host and device memory primitives: pinned host arrays, device arrays, async copies.

Pinned (page-locked) host memory is what lets a copy engine move data while
the SMs compute: ``cudaMemcpyAsync`` from pageable memory first copies into a
hidden pinned buffer on the CPU, and blocks the host while it does.

:class:`DeviceArray` is fullpipe's device array: a pointer, a shape and a dtype,
with ``__cuda_array_interface__`` so that PyTorch
(``torch.as_tensor(a, device="cuda")``) and CuPy (``cupy.asarray(a)``) see it
without copies.
"""

from __future__ import annotations

import collections
import ctypes
import functools
import math
import weakref
from typing import Any, Callable

import numpy as np

from . import driver as drv
from .device import ensure_current, ensure_current_for_stream
from .streams import stream_handle

CU_MEMHOSTALLOC_PORTABLE = 0x01


# --------------------------------------------------------------------------- pinned host
class PinnedBuffer:
    """Page-locked host memory from cuMemHostAlloc; freed by :meth:`free` or GC.

    ``device``: whose context pins it (None: the thread's current context, else device
    0's). The memory is portable: every context can use it. For buffers that come and
    go, take them from a :class:`~fullpipe.cuda.pinned_pool.PinnedPool` instead."""

    def __init__(self, nbytes: int, device: Any = None):
        if not isinstance(nbytes, int) or nbytes <= 0:
            raise ValueError(f"pinned buffer size must be a positive int, got {nbytes!r}")
        self.nbytes = nbytes
        ensure_current(device)
        free_collected()  # a safe point: frees what the collector found since the last one
        self.ptr = int(drv.call("cuMemHostAlloc", nbytes, CU_MEMHOSTALLOC_PORTABLE))
        self._finalizer = weakref.finalize(self, defer_free, _free_host, self.ptr)

    def free(self) -> None:
        """Unpin now (the collector only queues the free: see :func:`defer_free`)."""
        if self._finalizer.detach() is not None:
            _free_host(self.ptr)

    @property
    def freed(self) -> bool:
        return not self._finalizer.alive

    def array(self, shape: Any, dtype: Any = np.uint8) -> np.ndarray:
        """A NumPy view of (the start of) this buffer; it keeps the buffer alive."""
        dtype = np.dtype(dtype)
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        need = math.prod(shape) * dtype.itemsize
        if need > self.nbytes:
            raise ValueError(f"view of {need} bytes does not fit a {self.nbytes}-byte pinned buffer")
        if self.freed:
            raise ValueError("pinned buffer was freed")
        raw = (ctypes.c_byte * max(need, 1)).from_address(self.ptr)
        raw.owner = self  # the array's base chain ends at raw, which keeps this buffer alive
        return np.frombuffer(raw, dtype=np.uint8, count=need).view(dtype).reshape(shape)


def _free_host(ptr: int) -> None:
    ensure_current()  # a buffer may be freed in any thread
    drv.call("cuMemFreeHost", ptr)


# --------------------------------------------------------------------------- frees found by the collector
# The garbage collector runs inside whatever Python code is executing: also in a thread
# that is between cuStreamBeginCapture and cuStreamEndCapture. There cuMemFreeHost is
# refused (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) and the refusal invalidates the
# capture, so the graph fails later with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, far
# from its cause (seen on the H200: a test's pinned arrays, freed by the collector while
# the next test captured). A collected buffer's free therefore waits in this queue for a
# safe point: the next pinned allocation, the end of a pipeline run, or free_collected().
_collected: collections.deque = collections.deque()


def defer_free(free: Callable[[int], None], ptr: int) -> None:
    """Queue ``free(ptr)`` for the next :func:`free_collected` (no CUDA call here)."""
    _collected.append((free, ptr))


def free_collected() -> int:
    """Run the frees the garbage collector queued; returns how many ran. Call it where
    no stream capture of this thread can be in progress."""
    done = 0
    while True:
        try:
            free, ptr = _collected.popleft()
        except IndexError:
            return done
        try:
            free(ptr)
            done += 1
        except Exception:  # noqa: BLE001 - context gone (e.g. at exit): the OS reclaims it
            pass


def pinned_empty(shape: Any, dtype: Any = np.float32, *, device: Any = None) -> np.ndarray:
    """An uninitialised NumPy array in newly pinned host memory (freed with the array).
    ``fullpipe.cuda.default_pinned_pool().empty(shape, dtype)`` reuses buffers instead."""
    dtype = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    nbytes = max(math.prod(shape) * dtype.itemsize, 1)
    return PinnedBuffer(nbytes, device).array(shape, dtype)


def is_pinned(array: np.ndarray) -> bool:
    """True when the array's memory is page-locked and known to the driver, at its first
    and its last byte."""
    from cuda.bindings import driver

    ptr = array.__array_interface__["data"][0]
    ensure_current()  # without a context the driver says "not pinned" for every pointer
    ends = (ptr, ptr + array.nbytes - 1) if array.nbytes > 1 else (ptr,)
    return all(int(driver.cuMemHostGetFlags(p)[0]) == 0 for p in ends)


def host_pointer(array: np.ndarray) -> int:
    if not isinstance(array, np.ndarray):
        raise TypeError(f"expected a NumPy array, got {type(array).__name__}")
    if not array.flags.c_contiguous:
        raise ValueError("host array must be C-contiguous (use np.ascontiguousarray)")
    return int(array.__array_interface__["data"][0])


# --------------------------------------------------------------------------- device arrays
class DeviceArray:
    """A C-contiguous array in device memory: ``ptr``, ``shape``, ``dtype``.

    ``owner`` keeps the memory alive (a cuda.core Buffer, a torch tensor ...).
    """

    def __init__(self, ptr: int, shape: Any, dtype: Any, owner: Any = None, device_index: int = 0):
        self.ptr = int(ptr)
        self.shape = (shape,) if isinstance(shape, int) else tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.owner = owner
        self.device_index = device_index

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, ptr=0x{self.ptr:x})"

    @property
    def __cuda_array_interface__(self) -> dict:
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.ptr, False),
            "version": 3,
            "strides": None,
            "stream": None,  # fullpipe orders work by streams and events itself
        }

    def copy_from_host(self, src: np.ndarray, stream: Any) -> None:
        _check_same_bytes(src.nbytes, self.nbytes)
        copy_h2d(self.ptr, src, stream)

    def copy_to_host(self, dst: np.ndarray, stream: Any) -> None:
        _check_same_bytes(dst.nbytes, self.nbytes)
        copy_d2h(dst, self.ptr, stream)

    def to_numpy(self, stream: Any) -> np.ndarray:
        """Copy to a new pageable NumPy array and wait for it (tests and debugging)."""
        out = pinned_empty(self.shape, self.dtype)
        self.copy_to_host(out, stream)
        with drv.translated("cuStreamSynchronize"):
            stream.sync()
        return np.array(out)


def _check_same_bytes(a: int, b: int) -> None:
    if a != b:
        raise ValueError(f"size mismatch: host array has {a} bytes, device array {b}")


def device_empty(shape: Any, dtype: Any, stream: Any, memory_resource: Any) -> DeviceArray:
    """Allocate a DeviceArray from ``memory_resource`` (a cuda.core MemoryResource or a
    fullpipe DevicePool), stream-ordered on ``stream``."""
    dtype = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    nbytes = max(math.prod(shape) * dtype.itemsize, 1)
    ensure_current_for_stream(stream)
    with drv.translated("cuMemAllocFromPoolAsync"):
        buf = memory_resource.allocate(nbytes, stream=stream)
    return DeviceArray(int(buf.handle), shape, dtype, owner=buf)


@functools.lru_cache(maxsize=1024)
def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major (C-contiguous) strides, in elements, of an array of ``shape``; an extent
    of 0 counts as 1, as PyTorch's contiguous strides do."""
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return tuple(reversed(strides))


def as_device_array(obj: Any, stream: Any = None) -> DeviceArray:
    """View a PyTorch/CuPy/Numba/fullpipe device array (no copy) as a DeviceArray.

    Raises TypeError for host arrays and ValueError for non-contiguous ones.
    """
    if isinstance(obj, DeviceArray):
        return obj
    if isinstance(obj, np.ndarray):
        raise TypeError("expected a device array, got a NumPy (host) array: copy it to the GPU first")
    from cuda.core.utils import StridedMemoryView

    stream_ptr = -1 if stream is None else int(stream_handle(stream))
    try:
        view = StridedMemoryView.from_any_interface(obj, stream_ptr=stream_ptr)
    except Exception as exc:
        raise TypeError(
            f"cannot view {type(obj).__name__} as a device array (it needs DLPack or "
            f"__cuda_array_interface__): {exc}"
        ) from exc
    if not view.is_device_accessible:
        raise TypeError(f"{type(obj).__name__} lives in host memory; pass a device array")
    dtype = np.dtype(view.dtype)
    shape = tuple(view.shape)
    if view.strides is not None:
        if tuple(view.strides) != contiguous_strides(shape) and math.prod(shape) > 1:
            raise ValueError(
                f"{type(obj).__name__} is not C-contiguous (strides {view.strides} in elements); "
                "call .contiguous() / cupy.ascontiguousarray first"
            )
    return DeviceArray(view.ptr, shape, dtype, owner=obj, device_index=view.device_id)


# --------------------------------------------------------------------------- copies
def copy_h2d(dst_ptr: int, src: np.ndarray, stream: Any, nbytes: int | None = None) -> None:
    """cuMemcpyHtoDAsync. Asynchronous only if ``src`` is pinned."""
    n = src.nbytes if nbytes is None else nbytes
    ensure_current_for_stream(stream)
    drv.call("cuMemcpyHtoDAsync", dst_ptr, host_pointer(src), n, stream_handle(stream))


def copy_d2h(dst: np.ndarray, src_ptr: int, stream: Any, nbytes: int | None = None) -> None:
    """cuMemcpyDtoHAsync. Asynchronous only if ``dst`` is pinned."""
    if not dst.flags.writeable:
        raise ValueError("destination host array is read-only")
    n = dst.nbytes if nbytes is None else nbytes
    ensure_current_for_stream(stream)
    drv.call("cuMemcpyDtoHAsync", host_pointer(dst), src_ptr, n, stream_handle(stream))


def copy_d2d(dst_ptr: int, src_ptr: int, nbytes: int, stream: Any) -> None:
    ensure_current_for_stream(stream)
    drv.call("cuMemcpyDtoDAsync", dst_ptr, src_ptr, nbytes, stream_handle(stream))


def memset_d8(ptr: int, value: int, nbytes: int, stream: Any) -> None:
    ensure_current_for_stream(stream)
    drv.call("cuMemsetD8Async", ptr, value & 0xFF, nbytes, stream_handle(stream))
