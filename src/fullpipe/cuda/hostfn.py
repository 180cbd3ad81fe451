"""Host functions on a stream (cuLaunchHostFunc), made safe to use from Python.

A host function runs on a driver thread when the stream reaches it, after all
work enqueued before it and before all work enqueued after it. Rules:

1. It must not call CUDA. The driver may deadlock or return
   CUDA_ERROR_NOT_PERMITTED. Every CUDA call made through fullpipe from inside
   a host function raises RuntimeError instead (see driver.py). Calls into
   other libraries are not guarded: do not make them.
2. It must do little: set a flag, put an item on a queue. While it runs, the
   stream is stalled.
3. The Python callable must stay alive until it has run. :func:`launch_host_func`
   keeps it in a registry and drops it after it ran.
4. A Python host function needs the GIL to run, and its stream waits until it has
   run. A thread that holds the GIL while it waits for the device (some libraries'
   calls do, e.g. CuPy loading a kernel lazily) then deadlocks with it. fullpipe's
   own pipelines therefore use native host functions
   (:func:`launch_native_host_func`), which need no GIL.

An exception raised by the callable cannot propagate through the driver; it is
stored on the returned :class:`HostCall` and re-raised by :meth:`HostCall.result`
or by :func:`raise_pending`.
"""

from __future__ import annotations

import ctypes
import itertools
import threading
from typing import Any, Callable

from . import driver as drv
from .device import ensure_current_for_stream
from .streams import stream_handle

_CALLBACK_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

_lock = threading.Lock()
_pending: dict[int, "HostCall"] = {}  # keeps callables alive until they ran
_failed: list["HostCall"] = []  # calls that raised, until someone collects them
_ids = itertools.count(1)


class HostCall:
    """One enqueued host function: ``done`` once it ran, ``exception`` if it raised."""

    __slots__ = ("fn", "args", "done", "exception", "_event")

    def __init__(self, fn: Callable[..., Any], args: tuple):
        self.fn = fn
        self.args = args
        self.done = False
        self.exception: BaseException | None = None
        self._event = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        """Block the calling (ordinary) thread until the host function has run."""
        return self._event.wait(timeout)

    def result(self, timeout: float | None = None) -> None:
        if not self.wait(timeout):
            raise TimeoutError("host function has not run yet")
        if self.exception is not None:
            raise self.exception


def _trampoline(user_data: int | None) -> None:
    # Runs on the driver's callback thread; ctypes takes the GIL for us.
    with _lock:
        call = _pending.pop(int(user_data or 0), None)
    if call is None:  # pragma: no cover - cannot happen unless the registry was corrupted
        return
    with drv.host_function_scope():
        try:
            call.fn(*call.args)
        except BaseException as exc:  # noqa: BLE001 - must not escape into the driver
            call.exception = exc
            with _lock:
                _failed.append(call)
    call.done = True
    call._event.set()


_C_TRAMPOLINE = _CALLBACK_TYPE(_trampoline)  # module-level: lives as long as the process


def launch_host_func(stream: Any, fn: Callable[..., Any], *args: Any) -> HostCall:
    """Enqueue ``fn(*args)`` on ``stream``; return a :class:`HostCall` that tracks it."""
    if not callable(fn):
        raise TypeError(f"host function must be callable, got {type(fn).__name__}")
    from cuda.bindings import driver

    ensure_current_for_stream(stream)
    call = HostCall(fn, args)
    key = next(_ids)
    with _lock:
        _pending[key] = call
    fn_ptr = driver.CUhostFn(ctypes.cast(_C_TRAMPOLINE, ctypes.c_void_p).value)
    try:
        drv.call("cuLaunchHostFunc", stream_handle(stream), fn_ptr, key)
    except BaseException:
        with _lock:
            _pending.pop(key, None)
        raise
    return call


def pending_count() -> int:
    """Host functions enqueued that have not run yet (for leak checks)."""
    with _lock:
        return len(_pending)


def raise_pending() -> None:
    """Re-raise the first stored exception from a host function, if any, and clear them."""
    with _lock:
        failed = list(_failed)
        _failed.clear()
    if failed:
        raise failed[0].exception  # type: ignore[misc]


# --------------------------------------------------------------------------- native host functions
# cuda.bindings wraps every host function in a trampoline that takes the GIL before
# calling it, even a native one such as libc's sem_post. That makes the stream wait
# for the GIL, and deadlocks against any thread that holds the GIL while it waits for
# the device: seen on an H200 with CuPy, whose first launch of a CUB kernel
# (cudaFuncGetAttributes -> lazy module loading -> context synchronization) runs with
# the GIL held. A native host function enqueued straight through libcuda needs no GIL.
_libcuda_launch_host_func: Any = None


def _libcuda_entry() -> Any:
    global _libcuda_launch_host_func
    if _libcuda_launch_host_func is None:
        try:
            fn = ctypes.CDLL("libcuda.so.1").cuLaunchHostFunc
        except (OSError, AttributeError):
            fn = False  # no driver library here (CPU tests with a fake driver)
        else:
            fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
            fn.restype = ctypes.c_int
        _libcuda_launch_host_func = fn
    return _libcuda_launch_host_func


def launch_native_host_func(stream: Any, fn_address: int, data: int) -> None:
    """Enqueue the C function at ``fn_address`` (``void fn(void*)``) with ``data`` on
    ``stream``, without any Python in the call path when it runs: no GIL, no CUDA.
    Only for native functions that obey the host-function rules (e.g. ``sem_post``)."""
    drv._forbid_inside_host_function("cuLaunchHostFunc")
    ensure_current_for_stream(stream)
    entry = _libcuda_entry()
    if not entry:
        from cuda.bindings import driver

        drv.call("cuLaunchHostFunc", stream_handle(stream), driver.CUhostFn(fn_address), data)
        return
    err = entry(int(stream_handle(stream)), fn_address, data)
    if err != 0:
        from cuda.bindings import driver

        raise drv.error_from_code("cuLaunchHostFunc", driver.CUresult(err))
