"""Measuring a StreamPipeline run the way the experiments compare them."""

from __future__ import annotations

from typing import Any


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
