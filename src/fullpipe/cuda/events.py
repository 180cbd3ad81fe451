"""Events: timing and non-timing; record, wait, elapsed time.

Rules the experiments follow (see the design notes):
- record timing events on the stream that did the work, or on a stream that
  has joined all the working streams first;
- an event on the legacy default stream does not wait for non-blocking
  streams, so timing that way measures nothing.
"""

from __future__ import annotations

from typing import Any

from . import driver as drv
from .device import ensure_current, ensure_current_for_stream


def _core_device(device: Any):
    return getattr(device, "core", device)


def create_event(device: Any, *, timing: bool = False, blocking_sync: bool = False):
    """A new event on ``device`` (made current in this thread if it is not). Non-timing
    events are cheaper; use them for dependencies."""
    from cuda.core import EventOptions

    ensure_current(device)
    with drv.translated("cuEventCreate"):
        return _core_device(device).create_event(
            options=EventOptions(timing_enabled=timing, blocking_sync=blocking_sync)
        )


def record(stream: Any, event: Any = None, *, timing: bool = False):
    """Record ``event`` (or a new one) on ``stream`` and return it."""
    from cuda.core import EventOptions

    ensure_current_for_stream(stream)
    with drv.translated("cuEventRecord"):
        if event is None:
            return stream.record(options=EventOptions(timing_enabled=timing))
        return stream.record(event)


def wait(stream: Any, event: Any) -> None:
    """Make ``stream`` wait for ``event`` on the device (cuStreamWaitEvent): no host block."""
    ensure_current_for_stream(stream)
    with drv.translated("cuStreamWaitEvent"):
        stream.wait(event)


def join(waiter: Any, *streams: Any) -> None:
    """Make ``waiter`` wait for all work enqueued so far on each of ``streams``."""
    for s in streams:
        if s is not waiter:
            wait(waiter, record(s))


def start_together(streams: Any) -> Any:
    """A timing event after all work so far on every stream, that every stream then
    waits for: a common start for work spread over ``streams`` (the first one records it)."""
    first = streams[0]
    join(first, *streams)
    start = record(first, timing=True)
    for s in streams[1:]:
        wait(s, start)
    return start


def elapsed_ms(start: Any, end: Any) -> float:
    """Milliseconds between two completed timing events (cuEventElapsedTime)."""
    ensure_current()
    return float(drv.call("cuEventElapsedTime", start.handle, end.handle))
