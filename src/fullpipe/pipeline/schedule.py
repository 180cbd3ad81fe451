"""Pipeline parallelism on paper: which stage runs which micro-batch when, and where to cut.

A model split into S stages (one per GPU) processes M micro-batches. In the GPipe
fill-drain schedule (forward only, as in inference), stage s runs micro-batch m at tick
m + s: the pipeline fills for S - 1 ticks, runs full, and drains for S - 1 ticks. With
equal stages, every stage idles (S - 1) of the M + S - 1 ticks: the bubble.

    >>> bubble_fraction(2, 16)           # 2 GPUs, 16 micro-batches
    0.0588...
    >>> split_layers([1.0] * 12, 4)      # 12 equal layers on 4 GPUs
    [range(0, 3), range(3, 6), range(6, 9), range(9, 12)]

Nothing here touches a GPU.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence


@dataclasses.dataclass(frozen=True)
class Step:
    tick: int
    stage: int
    microbatch: int


def _check_counts(stages: int, microbatches: int) -> None:
    for name, v in (("stages", stages), ("microbatches", microbatches)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an int >= 1, got {v!r}")


def fill_drain(stages: int, microbatches: int) -> list[list[Step]]:
    """The GPipe forward schedule, one list of steps per tick (stage order within a tick)."""
    _check_counts(stages, microbatches)
    ticks = []
    for t in range(microbatches + stages - 1):
        ticks.append([Step(t, s, t - s) for s in range(stages) if 0 <= t - s < microbatches])
    return ticks


def enqueue_order(stages: int, microbatches: int) -> list[Step]:
    """The steps in the order one host thread should enqueue them: tick by tick, the
    last stage first within a tick. Enqueueing a stage's work never waits for the GPU;
    this order puts each micro-batch's next stage in the queue as soon as its producer
    is, so no GPU's queue runs dry while the host is busy with another's."""
    return [step for tick in fill_drain(stages, microbatches) for step in reversed(tick)]


def bubble_fraction(stages: int, microbatches: int) -> float:
    """The share of each stage's time spent idle in fill-drain with equal stages."""
    _check_counts(stages, microbatches)
    return (stages - 1) / (microbatches + stages - 1)


def ideal_speedup(stages: int, microbatches: int) -> float:
    """Throughput on ``stages`` GPUs over one GPU, with equal stages and free boundaries."""
    return stages * (1.0 - bubble_fraction(stages, microbatches))


def split_layers(costs: Sequence[float], stages: int, *, first_extra: float = 0.0,
                 last_extra: float = 0.0) -> list[range]:
    """Cut layers ``0 .. len(costs)-1`` into ``stages`` contiguous, non-empty ranges so that
    the slowest stage is as fast as it can be (the pipeline runs at its pace). The first
    stage also pays ``first_extra`` (e.g. the embedding), the last ``last_extra`` (e.g.
    the final norm and the LM head)."""
    n = len(costs)
    _check_counts(stages, max(n, 1))
    if n < stages:
        raise ValueError(f"cannot cut {n} layers into {stages} non-empty stages")
    if any(c < 0 for c in costs) or first_extra < 0 or last_extra < 0:
        raise ValueError("costs must be >= 0")
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + float(c))

    def cost(i: int, j: int, s: int) -> float:  # layers i..j-1 as stage s
        return prefix[j] - prefix[i] + (first_extra if s == 0 else 0.0) + (last_extra if s == stages - 1 else 0.0)

    # best[s][j]: smallest possible max stage cost placing layers 0..j-1 in stages 0..s.
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(stages)]
    cut = [[0] * (n + 1) for _ in range(stages)]
    for j in range(1, n + 1):
        best[0][j] = cost(0, j, 0)
    for s in range(1, stages):
        for j in range(s + 1, n + 1):
            for i in range(s, j):  # stage s takes layers i..j-1
                v = max(best[s - 1][i], cost(i, j, s))
                if v < best[s][j] - 1e-12:
                    best[s][j], cut[s][j] = v, i
    ranges, j = [], n
    for s in range(stages - 1, 0, -1):
        i = cut[s][j]
        ranges.append(range(i, j))
        j = i
    ranges.append(range(0, j))
    return ranges[::-1]


def stage_costs(costs: Sequence[float], ranges: Sequence[range], *, first_extra: float = 0.0,
                last_extra: float = 0.0) -> list[float]:
    """Each stage's cost under a split (for reports: the slowest sets the pace)."""
    out = [sum(float(costs[i]) for i in r) for r in ranges]
    if out:
        out[0] += first_extra
        out[-1] += last_extra
    return out
