"""Timing device work the way the design's rules ask: events recorded on the stream that
did the work (or on a timing stream every working stream is joined into), warm-up first,
repeats, the median, and the spread that says how far to trust a difference.

:func:`time_streams` records a start event on a timing stream, makes every working stream
wait for it, enqueues the work, joins every working stream back into the timing stream and
records the end event there: the elapsed time covers all the work and nothing else (an
event on the legacy default stream would not wait for non-blocking streams).
"""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from typing import Any, Callable, Iterator, Sequence

from . import driver as drv
from .events import create_event, elapsed_ms, record, wait


def time_on_stream(
    fn: Callable[[], Any], stream: Any, *, warmup: int = 2, repeat: int = 10
) -> list[float]:
    """Run ``fn()`` (which enqueues work on ``stream``) and time each run with events
    recorded on ``stream``. Returns the per-run milliseconds."""
    for _ in range(warmup):
        fn()
    with drv.translated("cuStreamSynchronize"):
        stream.sync()
    times = []
    for _ in range(repeat):
        start = record(stream, timing=True)
        fn()
        end = record(stream, timing=True)
        with drv.translated("cuEventSynchronize"):
            end.sync()
        times.append(elapsed_ms(start, end))
    return times


def time_streams(
    device: Any,
    timing_stream: Any,
    work: Sequence[tuple[Any, Callable[[], Any]]],
    *,
    warmup: int = 1,
    repeat: int = 5,
) -> list[float]:
    """Milliseconds from "every stream may start" to "every stream is done" for the
    ``(stream, enqueue_fn)`` pairs in ``work``, run together, ``repeat`` times."""
    streams = []
    for s, _ in work:
        if s is not timing_stream and all(s is not t for t in streams):
            streams.append(s)
    start = create_event(device, timing=True)
    end = create_event(device, timing=True)
    joins = [create_event(device) for _ in streams]
    times = []
    for it in range(warmup + repeat):
        record(timing_stream, start)
        for s in streams:
            wait(s, start)
        for _, fn in work:
            fn()
        for s, ev in zip(streams, joins):
            record(s, ev)
            wait(timing_stream, ev)
        record(timing_stream, end)
        with drv.translated("cuEventSynchronize"):
            end.sync()
        if it >= warmup:
            times.append(elapsed_ms(start, end))
    return times


class StreamGate:
    """Holds a stream's next work until the host has enqueued all of it, so that short
    kernels timed back to back run back to back: without it, a kernel shorter than the
    host's cost to launch the next one is timed with the host's gaps between them.

        gate = StreamGate.for_device(device_index)
        with gate.hold(stream):      # the stream waits here (cuStreamWaitValue32) ...
            start = record(stream, timing=True); [launch() for _ in range(n)]; end = ...
        # ... until the host leaves the block: a write from another stream opens it

    Each hold waits for a new value (a cyclic >=, so a write that lands before the wait is
    reached still opens it), and the word only ever rises (``_open`` writes a value only
    above the last one written, under the lock): holds of several threads open each other
    early at worst, which costs a timing its back-to-back launches, never a hang. One gate
    a device, kept for the process (its word: 4 bytes of cuMemAlloc memory; the driver
    refuses stream memory operations on stream-ordered pool memory)."""

    _gates: dict[int, "StreamGate"] = {}
    _lock = threading.Lock()

    @classmethod
    def for_device(cls, device_index: int) -> "StreamGate":
        with cls._lock:
            gate = cls._gates.get(device_index)
            if gate is None:
                gate = cls._gates[device_index] = cls(device_index)
            return gate

    def __init__(self, device_index: int):
        from cuda.core import Device as CoreDevice

        from .streams import create_stream

        self._device_index = device_index
        self._writer = create_stream(CoreDevice(device_index))  # (makes the device current)
        self._word = int(drv.call("cuMemAlloc", 4))
        drv.call("cuMemsetD32", self._word, 0, 1)
        self._value = 0   # the last value a hold waits for
        self._opened = 0  # the last value written

    def _open(self, value: int) -> None:
        from .device import ensure_current

        ensure_current(self._device_index)  # (also from the watchdog's thread)
        with self._lock:
            if 0 < (value - self._opened) % 2**32 < 2**31:  # (cyclically above: raise the word; else it is already)
                self._opened = value
                drv.call("cuStreamWriteValue32", int(self._writer.handle), self._word, value, 0)

    @contextlib.contextmanager
    def hold(self, stream: Any, *, at_most_s: float = 2.0) -> Iterator[None]:
        """Hold ``stream`` while the block runs; a watchdog opens the gate after
        ``at_most_s`` anyway: should the block wait on the GPU (a device-wide sync in an
        allocator, say), the held stream would otherwise never run and the wait never end.
        Opened early, a timing only loses its back-to-back launches."""
        geq = int(drv.driver().CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_GEQ)
        with self._lock:
            self._value = (self._value + 1) % 2**32
            value = self._value
        watchdog = threading.Timer(at_most_s, self._open, (value,))
        watchdog.daemon = True
        watchdog.start()
        try:
            drv.call("cuStreamWaitValue32", int(stream.handle), self._word, value, geq)
            yield
        finally:
            watchdog.cancel()
            self._open(value)


def time_host(fn: Callable[[], Any], *, warmup: int = 1, repeat: int = 5) -> list[float]:
    """Wall-clock milliseconds of ``fn()``, which must itself wait for its GPU work."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def spread(xs: list[float]) -> float:
    """(max - min) / median: how much to trust a difference between two medians."""
    m = median(xs)
    return (max(xs) - min(xs)) / m if m else float("nan")


def gbps(nbytes: float, ms: float) -> float:
    return nbytes / (ms * 1e6) if ms > 0 else float("nan")
