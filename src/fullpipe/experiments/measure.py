"""Measuring a StreamPipeline run the way the experiments compare them."""

from __future__ import annotations

import time
from typing import Any, Iterator


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
    """The order of one round of alternating rounds: every contender once, in the rows
    of a balanced Latin square (Williams' design). Over ``n`` rounds (``2n`` for an odd
    number of contenders) each contender runs once in every position and right after
    every other contender equally often.

    Why not a fixed order: it gave the first of each round a handicap (session 13,
    `bench workloads`: chunk='auto', always first after the progress line, read 28.5 ms
    where a fixed pipeline at nearly its chunk read 25.5 ms). Why not a rotation: each
    contender then always follows the same one, and inherits what it leaves behind
    (session 15: a pipeline timed right after one whose eight staging threads had just
    copied 545 MB read 0.57x compute alone in every round, 0.63-0.66x elsewhere)."""
    n = len(contenders)
    if n < 2:
        return list(contenders)
    first_row = [0]
    low, high = 1, n - 1
    while len(first_row) < n:  # 0, 1, n-1, 2, n-2, ...
        first_row.append(low)
        low += 1
        if len(first_row) < n:
            first_row.append(high)
            high -= 1
    r = round_index % (n if n % 2 == 0 else 2 * n)
    order = [(i + r) % n for i in first_row]
    if r >= n:  # odd n: the mirrored rows complete the design
        order.reverse()
    return [contenders[i] for i in order]


def square_rounds(n_contenders: int) -> int:
    """Rounds of one whole balanced Latin square of ``in_turn``: n, or 2n for odd n."""
    return 1 if n_contenders < 2 else n_contenders * (1 if n_contenders % 2 == 0 else 2)


def rounds_within(n_contenders: int, round_s: float, budget_s: float, least: int) -> int:
    """How many alternating rounds to time, given that one took ``round_s``: a whole
    balanced square when it fits in ``budget_s``, else as many rounds as fit, and never
    fewer than ``least``. Cheap contenders get more rounds, so their medians stand on
    more samples where the host's drift is as large as the differences measured
    (session 15: chunk='auto' read 27.0 ms in three rounds of a sweep and 25.9 ms in
    the rounds before, at the chunk a fixed pipeline ran in 25.5 ms)."""
    fit = int(budget_s // round_s) if round_s > 0 else square_rounds(n_contenders)
    return max(least, min(square_rounds(n_contenders), fit))


def timed_rounds(contenders: list, least: int, budget_s: float) -> Iterator[tuple[int, int, list]]:
    """Alternating rounds: (round index, rounds planned, that round's order from
    ``in_turn``) for at least ``least`` rounds, and up to a whole balanced square when the
    first round's time (the caller's loop body) says they fit in ``budget_s``
    (:func:`rounds_within`). ``least`` 0: none."""
    r, rounds = 0, least
    while r < rounds:
        t0 = time.perf_counter()
        yield r, rounds, in_turn(contenders, r)
        if r == 0:
            rounds = rounds_within(len(contenders), time.perf_counter() - t0, budget_s, least)
        r += 1
