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


def in_turn(contenders: list, round_index: int) -> list:
    """The order of one round of alternating rounds: every contender once, starting one
    further along each round. A fixed order gave the first of each round a handicap
    (session 13, `bench workloads`: chunk='auto', always first after the progress line,
    read 28.5 ms where a fixed pipeline at nearly its chunk read 25.5 ms; timed with no
    progress line between them, the two agreed within about 1 ms), and the bound, timed
    first, a handicap of its own."""
    k = round_index % len(contenders) if contenders else 0
    return contenders[k:] + contenders[:k]
