"""Timing done the way the design's rules say: events on the working stream,
warm-up first, repeats, the median."""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

from ..cuda import driver as drv
from ..cuda.events import elapsed_ms, record


def median_pipeline_run(pipe: Any, x: Any, out: Any, repeat: int):
    """One warm-up ``pipe.run(x, out=out)`` (pool reserves, ring allocated, output pages
    touched), then ``repeat`` runs; returns the stats of the median run by wall time."""
    pipe.run(x, out=out)
    runs = []
    for _ in range(repeat):
        pipe.run(x, out=out)
        runs.append(pipe.stats)
    runs.sort(key=lambda s: s.wall_ms)
    return runs[len(runs) // 2]


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
