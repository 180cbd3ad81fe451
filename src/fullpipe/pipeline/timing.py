"""Timing work spread over several streams, the way the design's rules ask.

:func:`time_streams` records a start event on a timing stream, makes every
working stream wait for it, enqueues the work, joins every working stream back
into the timing stream and records the end event there: the elapsed time covers
all the work and nothing else (an event on the legacy default stream would not
wait for non-blocking streams). Warm-up, repeats, the median.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from ..cuda import driver as drv
from ..cuda.events import create_event, elapsed_ms, record, wait


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


def device_info(device: Any) -> dict[str, Any]:
    """The device facts an experiment's Result carries."""
    f = device.facts
    return {
        "name": f.name, "arch": f.arch, "sm_count": f.sm_count, "copy_engines": f.copy_engines,
        "max_resident_grids": f.max_resident_grids, "driver": f.driver_version,
        "pcie": f"gen{f.pcie_generation} x{f.pcie_width}" if f.pcie_generation else None,
    }


def gbps(nbytes: float, ms: float) -> float:
    return nbytes / (ms * 1e6) if ms > 0 else float("nan")
