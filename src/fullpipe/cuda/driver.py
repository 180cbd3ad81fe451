"""Checked calls into the CUDA driver API (through cuda.bindings).

Every driver call fullpipe makes goes through :func:`call` (or :func:`bound`), which raises
:class:`fullpipe.CudaError` naming the call and the driver's error string.
It also enforces the host-function rule: a function enqueued with
``cuLaunchHostFunc`` must not call CUDA (doing so can deadlock), so a call made
from inside one raises instead of hanging.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator

from ..errors import CudaError

_host_fn_state = threading.local()


def inside_host_function() -> bool:
    """True while the current thread is running a fullpipe host function."""
    return getattr(_host_fn_state, "depth", 0) > 0


@contextlib.contextmanager
def host_function_scope() -> Iterator[None]:
    """Mark the current thread as running a host function (see hostfn.py)."""
    _host_fn_state.depth = getattr(_host_fn_state, "depth", 0) + 1
    try:
        yield
    finally:
        _host_fn_state.depth -= 1


def _forbid_inside_host_function(call: str) -> None:
    if inside_host_function():
        raise RuntimeError(
            f"{call} called from inside a host function. A host function must not call "
            "CUDA (the driver may deadlock): set a flag or put an item on a queue, and do "
            "the CUDA work on an ordinary thread."
        )


def driver():
    """The cuda.bindings driver module (imported lazily: importing fullpipe needs no GPU)."""
    from cuda.bindings import driver as _driver

    return _driver


def uses_real_driver() -> bool:
    """False when a test has put a stand-in driver module in place of cuda.bindings'
    (CPU tests of the executor): code that manages contexts then has nothing to do."""
    return getattr(driver(), "__name__", "").startswith("cuda.bindings")


def error_from_code(call: str, err: Any) -> CudaError:
    drv = driver()
    code = int(err)
    try:
        _, name = drv.cuGetErrorName(err)
        _, desc = drv.cuGetErrorString(err)
        name = name.decode() if isinstance(name, bytes) else str(name)
        desc = desc.decode() if isinstance(desc, bytes) else str(desc)
    except Exception:  # the driver could not even describe the error
        name, desc = getattr(err, "name", str(err)), "no description available"
    return CudaError(call, code, name, desc)


def call(name: str, *args: Any) -> Any:
    """Call ``cuda.bindings.driver.<name>(*args)``; raise CudaError on failure.

    Returns the call's outputs: None, one value, or a tuple of values.
    """
    _forbid_inside_host_function(name)
    drv = driver()
    result = getattr(drv, name)(*args)
    err, outputs = result[0], result[1:]
    if int(err) != 0:
        raise error_from_code(name, err)
    if not outputs:
        return None
    return outputs[0] if len(outputs) == 1 else outputs


def bound(name: str) -> Callable[..., Any]:
    """:func:`call` of ``name`` with the function looked up once, for a hot path (a
    prepared launch): the same checks and errors, about a microsecond less a call."""
    fn = getattr(driver(), name)

    def bound_call(*args: Any) -> Any:
        _forbid_inside_host_function(name)
        result = fn(*args)
        if int(result[0]) != 0:
            raise error_from_code(name, result[0])
        return None if len(result) == 1 else (result[1] if len(result) == 2 else result[1:])

    return bound_call


@contextlib.contextmanager
def translated(call_name: str) -> Iterator[None]:
    """Turn errors raised by cuda.core inside the block into fullpipe.CudaError."""
    _forbid_inside_host_function(call_name)
    try:
        yield
    except CudaError:
        raise
    except Exception as exc:  # cuda.core raises its own CUDAError / RuntimeError
        if type(exc).__name__ in ("CUDAError", "NVRTCError") or "CUDA_ERROR" in str(exc):
            text = str(exc)
            name = text.split(":")[0].strip() if "CUDA_ERROR" in text else type(exc).__name__
            raise CudaError(call_name, None, name, text) from exc
        raise


def driver_version() -> int:
    """The driver's CUDA version as an integer, e.g. 13000 for 13.0."""
    return int(call("cuDriverGetVersion"))


def format_cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"
