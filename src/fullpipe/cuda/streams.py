"""Streams: explicit and non-blocking by default, the default streams by name.

fullpipe never puts work on the legacy default stream by accident: every
function that enqueues work takes a stream. The legacy default stream and the
per-thread default stream exist here only so that the experiments can show
what they do.

Kinds of stream, and what they synchronize with:

- ``create_stream()`` - non-blocking: never waits for the legacy default stream.
- ``create_stream(blocking=True)`` - an explicit stream that still synchronizes
  with the legacy default stream (cudaStreamCreate's default flags).
- ``legacy_default_stream()`` - stream 0 / cudaStreamLegacy: implicitly waits
  for, and is waited on by, every blocking stream in the context.
- ``per_thread_default_stream()`` - cudaStreamPerThread: one per host thread;
  behaves like a blocking explicit stream.
"""

from __future__ import annotations

import threading
from typing import Any

from . import driver as drv
from .device import ensure_current, ensure_current_for_stream


def _as_core_device(device: Any):
    return getattr(device, "core", device)


def create_stream(device: Any, *, priority: int | None = None, blocking: bool = False):
    """A new explicit stream on ``device`` (a fullpipe or cuda.core Device).

    ``priority``: lower numbers are higher priority, within the device's
    ``stream_priority_range``. ``blocking=True`` makes a stream that synchronizes
    with the legacy default stream, for experiments; leave it False otherwise.
    """
    from cuda.core import StreamOptions

    if priority is not None and (not isinstance(priority, int) or isinstance(priority, bool)):
        raise TypeError(f"priority must be an int or None, got {priority!r}")
    dev = _as_core_device(device)
    ensure_current(device)
    if priority is not None:
        least, greatest = drv.call("cuCtxGetStreamPriorityRange")
        if not greatest <= priority <= least:
            raise ValueError(
                f"stream priority {priority} is outside this device's range "
                f"[{greatest} (highest) .. {least} (lowest)]"
            )
    with drv.translated("cuStreamCreateWithPriority"):
        return dev.create_stream(options=StreamOptions(nonblocking=not blocking, priority=priority))


def legacy_default_stream():
    """The legacy default stream (handle 0x1). Only for experiments that demonstrate it."""
    from cuda.core import LEGACY_DEFAULT_STREAM

    return LEGACY_DEFAULT_STREAM


def stream_from_handle(handle: int):
    """A cuda.core Stream for an int CUstream handle, 0 meaning the legacy default stream
    (where PyTorch and CuPy work by default)."""
    from cuda.core import Stream

    return legacy_default_stream() if handle == 0 else Stream.from_handle(handle)


def per_thread_default_stream():
    """The calling thread's per-thread default stream (handle 0x2)."""
    from cuda.core import PER_THREAD_DEFAULT_STREAM

    return PER_THREAD_DEFAULT_STREAM


def stream_handle(stream: Any) -> Any:
    """The CUstream of a cuda.core Stream, or of anything with ``__cuda_stream__``."""
    if hasattr(stream, "handle"):
        return stream.handle
    if hasattr(stream, "__cuda_stream__"):
        from cuda.bindings import driver

        _, ptr = stream.__cuda_stream__()
        return driver.CUstream(ptr)
    raise TypeError(
        f"expected a stream (cuda.core.Stream, or an object with __cuda_stream__ such as a "
        f"torch/cupy stream), got {type(stream).__name__}"
    )


def as_core_stream(stream: Any):
    """Accept a cuda.core Stream or any object with ``__cuda_stream__`` (PyTorch, CuPy)."""
    from cuda.core import Stream

    if isinstance(stream, Stream):
        return stream
    if hasattr(stream, "__cuda_stream__"):
        ensure_current_for_stream(stream)
        with drv.translated("cuStreamGetCtx"):
            return Stream.from_handle(int(stream.__cuda_stream__()[1]))
    raise TypeError(
        f"expected a stream (cuda.core.Stream, or an object with __cuda_stream__ such as a "
        f"torch/cupy stream), got {type(stream).__name__}"
    )


# Streams that live as long as the process, lent to one pipeline at a time.
# Why not create and destroy streams per pipeline: caching allocators (CuPy's
# memory pool, PyTorch's) remember the stream on which each block was used and
# later record events on it or order reuse against it. A compute callable that
# allocates through them on a pipeline stream would leave them holding the handle
# of a destroyed stream, which the driver may hand out again for an unrelated one.
# Why not share them between pipelines open at once: one pipeline's graph capture
# would take in the other's work, and each would wait for the other's batches.
# Idle streams cost nothing.
_free_streams: dict[tuple[int, int | None], list] = {}
_stream_cache_lock = threading.Lock()  # pipelines may start in several threads at once


def _stream_key(device: Any, priority: int | None) -> tuple[int, int | None]:
    return int(_as_core_device(device).device_id), priority


def long_lived_streams(device: Any, count: int, *, priority: int | None = None) -> list:
    """``count`` non-blocking streams on ``device`` that are never destroyed and that no
    one else holds: streams given back with :func:`return_streams` first, new ones for
    the rest."""
    key = _stream_key(device, priority)
    with _stream_cache_lock:
        free = _free_streams.setdefault(key, [])
        taken, free[:count] = free[:count], []
    return taken + [create_stream(device, priority=priority) for _ in range(count - len(taken))]


def return_streams(device: Any, streams: list, *, priority: int | None = None) -> None:
    """Give streams from :func:`long_lived_streams` back once nothing of the caller's is
    left on them; later callers get them again."""
    key = _stream_key(device, priority)
    with _stream_cache_lock:
        _free_streams.setdefault(key, []).extend(streams)
