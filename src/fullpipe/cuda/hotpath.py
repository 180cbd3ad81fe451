"""Driver calls for per-batch hot loops, straight into libcuda through ctypes.

Why: a pipeline batch costs five or six driver calls (allocate, H2D, launch, D2H,
free, a host function). Through cuda.core and cuda.bindings each call also builds
Python wrapper objects (Buffer, CUdeviceptr, CUresult tuples, LaunchConfig, kernel
argument packing), which costs several microseconds per call; a ctypes call with
fixed argument types costs well under one. The executor's per-batch enqueue cost
is a target of its own (issue 3: <= 20 us for the four operations), so the loop
uses these entry points. Everything else in fullpipe keeps the checked, friendlier
``driver.call`` / cuda.core path.

Who holds the GIL during a call: a ``ctypes.CDLL`` function lets it go and takes it
back after. With compute threads running a framework's Python calls (run_batches of a
host-bound list), taking it back waits behind them, once per driver call: the
enqueueing thread's host time per batch halved when the calls that only enqueue work
or read state kept the GIL (front 16.6 -> 8.2 us, back 64 -> 33 us, a 29-batch encoder
list on three compute threads, H200 host, session 53, p351). Those calls (``KEEPS_GIL``:
event record and wait, stream-ordered free, event query and elapsed time, the pinned
flags, copies between the device and page-locked memory) go through ``ctypes.PyDLL``.
The calls that may wait for the device keep letting it go: a copy of pageable memory
(synchronous), a kernel or graph launch (a first launch may load its module and
synchronize the context), a pool allocation (it may trim and synchronize). A call that
keeps the GIL still waits when a stream's queue is full (thousands of operations
ahead): a host function that needs the GIL (a Python callback) at its head would then
wait for this call; fullpipe's own host functions are native (hostfn.py).

:class:`HotPath` binds the functions once. Without a loadable libcuda (CPU tests
with a fake driver) it forwards to the cuda.bindings-shaped ``driver()`` module, so
the same executor code runs against the fake.

:class:`PackedArgs` holds a kernel's arguments in ctypes storage with a ``void**``
array pointing at them: set new values, launch, and the driver copies them at
launch time, so the storage can be reused at once.
"""

from __future__ import annotations

import ctypes
from typing import Any, Sequence

from . import driver as drv

_u64, _vp, _sz, _int, _uint = ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_uint

# name -> (libcuda symbol, argtypes). Symbols as cuda.h's macros map them (API v2).
_SIGNATURES: dict[str, tuple[str, list[Any]]] = {
    "cuMemcpyHtoDAsync": ("cuMemcpyHtoDAsync_v2", [_u64, _vp, _sz, _vp]),
    "cuMemcpyDtoHAsync": ("cuMemcpyDtoHAsync_v2", [_vp, _u64, _sz, _vp]),
    "cuMemAllocFromPoolAsync": ("cuMemAllocFromPoolAsync", [ctypes.POINTER(_u64), _sz, _vp, _vp]),
    "cuMemFreeAsync": ("cuMemFreeAsync", [_u64, _vp]),
    "cuEventRecord": ("cuEventRecord", [_vp, _vp]),
    "cuStreamWaitEvent": ("cuStreamWaitEvent", [_vp, _vp, _uint]),
    "cuLaunchKernel": ("cuLaunchKernel", [_vp, _uint, _uint, _uint, _uint, _uint, _uint, _uint, _vp, _vp, _vp]),
    # StreamPipeline(graph=True) (pipeline/graphs.py): one launch per batch, plus a
    # memcpy-node update per direct (user-array) side.
    "cuGraphLaunch": ("cuGraphLaunch", [_vp, _vp]),
    "cuGraphExecMemcpyNodeSetParams": ("cuGraphExecMemcpyNodeSetParams", [_vp, _vp, _vp, _vp]),
    # Per-stage timing (StreamPipeline(timing=True)): four events read per batch.
    "cuEventQuery": ("cuEventQuery", [_vp]),
    "cuEventElapsedTime": ("cuEventElapsedTime_v2", [ctypes.POINTER(ctypes.c_float), _vp, _vp]),
    # run_batches asks for every batch and output whether it is pinned already.
    "cuMemHostGetFlags": ("cuMemHostGetFlags", [ctypes.POINTER(_uint), _vp]),
}
# Bound a second time, keeping the GIL (module docstring): the copies with page-locked host memory.
_PINNED_COPIES = {"cuMemcpyHtoDAsync pinned": "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync pinned": "cuMemcpyDtoHAsync"}
KEEPS_GIL = frozenset({"cuEventRecord", "cuStreamWaitEvent", "cuMemFreeAsync", "cuEventQuery", "cuEventElapsedTime",
                       "cuMemHostGetFlags", *_PINNED_COPIES})
_OLDER_SYMBOLS = {"cuEventElapsedTime_v2": "cuEventElapsedTime"}  # a driver before CUDA 12.8
CUDA_ERROR_NOT_READY = 600

_libcuda: Any = None
_libcuda_keeping_gil: Any = None


def _load_libcuda() -> Any:
    global _libcuda, _libcuda_keeping_gil
    if _libcuda is None:
        try:
            _libcuda_keeping_gil = ctypes.PyDLL("libcuda.so.1")  # (the same library: its calls keep the GIL)
            _libcuda = ctypes.CDLL("libcuda.so.1")  # (last: a set _libcuda says both are)
        except OSError:
            _libcuda = False
    return _libcuda


def handle_int(h: Any) -> int:
    """A driver handle (cuda.bindings object, cuda.core object with .handle, or int) as int."""
    if isinstance(h, int):
        return h
    inner = getattr(h, "handle", None)
    if inner is not None and inner is not h:
        return handle_int(inner)
    if hasattr(h, "__cuda_stream__"):  # a PyTorch / CuPy stream
        return int(h.__cuda_stream__()[1])
    return int(h)


class HotPath:
    """The few driver calls a pipeline makes per batch. Handles are plain ints.

    Every method raises :class:`fullpipe.CudaError` on failure, like ``driver.call``.
    """

    def __init__(self, use_libcuda: bool | None = None, keep_gil: bool = True):
        """``keep_gil`` False: every call lets the GIL go (a pipeline whose ring is signalled by
        Python host functions, recycle="pyhostfn": the device then waits for the GIL, and a
        call that keeps it while a full stream queue waits would never return)."""
        lib = _load_libcuda() if use_libcuda is not False else False
        # A fake driver in tests replaces driver(): never mix it with the real libcuda.
        if lib and use_libcuda is None and not _is_real_bindings(drv.driver()):
            lib = False
        self.native = bool(lib)
        self._fn: dict[str, Any] = {}
        if lib:
            signatures = dict(_SIGNATURES, **{name: _SIGNATURES[of] for name, of in _PINNED_COPIES.items()})
            for name, (symbol, argtypes) in signatures.items():
                from_lib = _libcuda_keeping_gil if keep_gil and name in KEEPS_GIL else lib
                f = getattr(from_lib, symbol, None) or getattr(from_lib, _OLDER_SYMBOLS.get(symbol, symbol))
                f.argtypes, f.restype = argtypes, _int
                self._fn[name] = f
        self._ptr = _u64()
        self._ptr_ref = ctypes.byref(self._ptr)
        self._ms = ctypes.c_float()
        self._ms_ref = ctypes.byref(self._ms)
        self._flags = ctypes.c_uint()
        self._flags_ref = ctypes.byref(self._flags)

    # ------------------------------------------------------------------ errors
    @staticmethod
    def _raise(name: str, code: int) -> None:
        from cuda.bindings import driver

        from ..errors import CudaError

        try:
            err = driver.CUresult(code)
        except ValueError:  # a code this cuda.bindings does not know
            raise CudaError(name, code, f"CUresult {code}", "unknown error code") from None
        raise drv.error_from_code(name, err)

    def _bindings(self, name: str, *args: Any) -> Any:
        result = getattr(drv.driver(), name)(*args)
        if int(result[0]) != 0:
            raise drv.error_from_code(name, result[0])
        return result[1] if len(result) > 1 else None

    # ------------------------------------------------------------------ calls
    def memcpy_htod(self, dst: int, src: int, nbytes: int, stream: int, pinned: bool = False) -> None:
        """cuMemcpyHtoDAsync; ``pinned``: ``src`` is page-locked (the call only enqueues
        the copy, and keeps the GIL: module docstring)."""
        if self.native:
            err = self._fn["cuMemcpyHtoDAsync pinned" if pinned else "cuMemcpyHtoDAsync"](dst, src, nbytes, stream)
            if err:
                self._raise("cuMemcpyHtoDAsync", err)
        else:
            self._bindings("cuMemcpyHtoDAsync", dst, src, nbytes, stream)

    def memcpy_dtoh(self, dst: int, src: int, nbytes: int, stream: int, pinned: bool = False) -> None:
        """cuMemcpyDtoHAsync; ``pinned``: ``dst`` is page-locked (as memcpy_htod)."""
        if self.native:
            err = self._fn["cuMemcpyDtoHAsync pinned" if pinned else "cuMemcpyDtoHAsync"](dst, src, nbytes, stream)
            if err:
                self._raise("cuMemcpyDtoHAsync", err)
        else:
            self._bindings("cuMemcpyDtoHAsync", dst, src, nbytes, stream)

    def alloc_from_pool(self, nbytes: int, pool: int, stream: int) -> int:
        """cuMemAllocFromPoolAsync; returns the device pointer. Not thread-safe per
        HotPath object (one output slot): give each thread its own."""
        if not self.native:
            return int(self._bindings("cuMemAllocFromPoolAsync", nbytes, pool, stream))
        err = self._fn["cuMemAllocFromPoolAsync"](self._ptr_ref, nbytes, pool, stream)
        if err:
            self._raise("cuMemAllocFromPoolAsync", err)
        return self._ptr.value

    def free_async(self, ptr: int, stream: int) -> None:
        if self.native:
            err = self._fn["cuMemFreeAsync"](ptr, stream)
            if err:
                self._raise("cuMemFreeAsync", err)
        else:
            self._bindings("cuMemFreeAsync", ptr, stream)

    def event_record(self, event: int, stream: int) -> None:
        if self.native:
            err = self._fn["cuEventRecord"](event, stream)
            if err:
                self._raise("cuEventRecord", err)
        else:
            self._bindings("cuEventRecord", event, stream)

    def event_done(self, event: int) -> bool:
        """cuEventQuery: True once the work before the event's last record has completed."""
        if not self.native:
            d = drv.driver()
            err = d.cuEventQuery(event)[0]
            if err == d.CUresult.CUDA_ERROR_NOT_READY:
                return False
            if int(err) != 0:
                raise drv.error_from_code("cuEventQuery", err)
            return True
        err = self._fn["cuEventQuery"](event)
        if err == CUDA_ERROR_NOT_READY:
            return False
        if err:
            self._raise("cuEventQuery", err)
        return True

    def elapsed_ms(self, start: int, end: int) -> float:
        """cuEventElapsedTime between two completed timing events. Not thread-safe per
        HotPath object (one output slot)."""
        if not self.native:
            return float(self._bindings("cuEventElapsedTime", start, end))
        err = self._fn["cuEventElapsedTime"](self._ms_ref, start, end)
        if err:
            self._raise("cuEventElapsedTime", err)
        return self._ms.value

    def host_pinned(self, ptr: int) -> bool | None:
        """cuMemHostGetFlags: is the host memory at ``ptr`` page-locked and known to the
        driver (the calling thread's context must be current)? None without libcuda: ask
        ``memory.is_pinned``. Not thread-safe per HotPath object (one output slot)."""
        if not self.native:
            return None
        return self._fn["cuMemHostGetFlags"](self._flags_ref, ptr) == 0

    def range_pinned(self, at: int, nbytes: int) -> bool | None:
        """host_pinned of the first and the last byte of ``nbytes`` at ``at`` (run_batches asks
        for every batch and output); None without libcuda."""
        got = self.host_pinned(at)
        if got and nbytes > 1:
            got = self.host_pinned(at + nbytes - 1)
        return got

    def stream_wait_event(self, stream: int, event: int) -> None:
        if self.native:
            err = self._fn["cuStreamWaitEvent"](stream, event, 0)
            if err:
                self._raise("cuStreamWaitEvent", err)
        else:
            self._bindings("cuStreamWaitEvent", stream, event, 0)

    def launch(self, kernel: int, grid: int, block: int, args: "PackedArgs", stream: int, shared_mem: int = 0,
               grid_y: int = 1, grid_z: int = 1) -> None:
        """cuLaunchKernel of a ``grid`` x ``grid_y`` x ``grid_z`` grid of 1-D blocks;
        ``kernel`` is a CUfunction or CUkernel handle."""
        if self.native:
            err = self._fn["cuLaunchKernel"](kernel, grid, grid_y, grid_z, block, 1, 1, shared_mem, stream,
                                             args.address, None)
            if err:
                self._raise("cuLaunchKernel", err)
        else:
            self._bindings("cuLaunchKernel", kernel, grid, grid_y, grid_z, block, 1, 1, shared_mem, stream,
                           args.address, 0)

    def graph_launch(self, graph_exec: int, stream: int) -> None:
        """cuGraphLaunch: the whole executable graph, ordered on ``stream`` after its work
        and after the previous launch of the same ``graph_exec``."""
        if self.native:
            err = self._fn["cuGraphLaunch"](graph_exec, stream)
            if err:
                self._raise("cuGraphLaunch", err)
        else:
            self._bindings("cuGraphLaunch", graph_exec, stream)

    def graph_exec_memcpy_params(self, graph_exec: int, node: int, params: "Memcpy3D", ctx: int) -> None:
        """cuGraphExecMemcpyNodeSetParams: the next launches of ``graph_exec`` copy as
        ``params`` says (launches already enqueued are not affected). ``node`` is the
        memcpy node of the graph ``graph_exec`` was instantiated from. Without libcuda
        (CPU tests) the ctypes struct goes to the fake driver as is."""
        if self.native:
            err = self._fn["cuGraphExecMemcpyNodeSetParams"](graph_exec, node, ctypes.addressof(params), ctx)
            if err:
                self._raise("cuGraphExecMemcpyNodeSetParams", err)
        else:
            self._bindings("cuGraphExecMemcpyNodeSetParams", graph_exec, node, params, ctx)


class Memcpy3D(ctypes.Structure):
    """cuda.h's CUDA_MEMCPY3D (the parameters of a graph memcpy node), field for field."""

    _fields_ = [
        ("srcXInBytes", _sz), ("srcY", _sz), ("srcZ", _sz), ("srcLOD", _sz),
        ("srcMemoryType", _int), ("srcHost", _vp), ("srcDevice", _u64), ("srcArray", _vp),
        ("reserved0", _vp), ("srcPitch", _sz), ("srcHeight", _sz),
        ("dstXInBytes", _sz), ("dstY", _sz), ("dstZ", _sz), ("dstLOD", _sz),
        ("dstMemoryType", _int), ("dstHost", _vp), ("dstDevice", _u64), ("dstArray", _vp),
        ("reserved1", _vp), ("dstPitch", _sz), ("dstHeight", _sz),
        ("WidthInBytes", _sz), ("Height", _sz), ("Depth", _sz),
    ]


class PackedArgs:
    """Kernel arguments in ctypes storage plus the ``void*[]`` the driver reads.

    >>> args = PackedArgs([ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int32])
    >>> args.set(x_ptr, y_ptr, n); hot.launch(kernel, grid, block, args, stream)
    """

    def __init__(self, types: Sequence[Any]):
        self._values = [t() for t in types]
        self._array = (_vp * len(self._values))(*[ctypes.addressof(v) for v in self._values])
        self.address = ctypes.addressof(self._array)

    def set(self, *values: Any) -> None:
        if len(values) != len(self._values):
            raise ValueError(f"kernel takes {len(self._values)} arguments, got {len(values)}")
        for slot, v in zip(self._values, values):
            slot.value = v


def _is_real_bindings(module: Any) -> bool:
    return getattr(module, "__name__", "").startswith("cuda.bindings")
