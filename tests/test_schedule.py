"""Pipeline-parallel planning: the fill-drain schedule and where to cut the layers (no GPU)."""

import itertools

import pytest

from fullpipe.pipeline.schedule import (Step, bubble_fraction, enqueue_order, fill_drain, ideal_speedup,
                                        split_layers, stage_costs)


@pytest.mark.parametrize("stages,micro", [(1, 1), (2, 1), (2, 8), (4, 3), (8, 32)])
def test_fill_drain_runs_every_stage_on_every_microbatch_once_in_order(stages, micro):
    ticks = fill_drain(stages, micro)
    steps = [s for t in ticks for s in t]
    assert sorted((s.stage, s.microbatch) for s in steps) == sorted(itertools.product(range(stages), range(micro)))
    when = {(s.stage, s.microbatch): s.tick for s in steps}
    for s, m in when:
        if s:  # a stage runs a micro-batch only after the stage before it did
            assert when[(s, m)] > when[(s - 1, m)]
        if m:  # and each stage keeps micro-batch order
            assert when[(s, m)] > when[(s, m - 1)]
    for t in ticks:  # one step per stage per tick
        assert len({s.stage for s in t}) == len(t)
    assert len(ticks) == micro + stages - 1


def test_bubble_is_the_idle_share_of_the_schedule():
    for stages, micro in [(2, 1), (2, 16), (4, 8), (8, 64)]:
        ticks = fill_drain(stages, micro)
        busy = sum(len(t) for t in ticks)
        idle = stages * len(ticks) - busy
        assert bubble_fraction(stages, micro) == pytest.approx(idle / (stages * len(ticks)))
    # The target: N GPUs >= 0.85 N x one GPU needs enough micro-batches.
    assert ideal_speedup(2, 16) / 2 > 0.85 and ideal_speedup(8, 16) / 8 < 0.85 < ideal_speedup(8, 64) / 8


def test_enqueue_order_puts_each_step_after_its_producer():
    order = enqueue_order(3, 5)
    pos = {(s.stage, s.microbatch): i for i, s in enumerate(order)}
    assert all(pos[(s, m)] > pos[(s - 1, m)] for s in range(1, 3) for m in range(5))
    assert order[0] == Step(0, 0, 0)


def _brute_force(costs, stages, first, last):
    n = len(costs)
    best = None
    for cuts in itertools.combinations(range(1, n), stages - 1):
        bounds = (0,) + cuts + (n,)
        ranges = [range(bounds[i], bounds[i + 1]) for i in range(stages)]
        worst = max(stage_costs(costs, ranges, first_extra=first, last_extra=last))
        best = worst if best is None else min(best, worst)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_split_layers_finds_the_best_contiguous_cut(seed):
    import random

    rng = random.Random(seed)
    n, stages = rng.randint(4, 10), rng.randint(2, 4)
    costs = [rng.uniform(0.5, 3.0) for _ in range(n)]
    first, last = rng.uniform(0, 2), rng.uniform(0, 4)
    ranges = split_layers(costs, stages, first_extra=first, last_extra=last)
    assert [i for r in ranges for i in r] == list(range(n)) and all(len(r) for r in ranges)
    assert max(stage_costs(costs, ranges, first_extra=first, last_extra=last)) == pytest.approx(
        _brute_force(costs, stages, first, last))


def test_split_layers_gives_the_last_stage_fewer_layers_when_it_holds_the_head():
    # 12 equal layers + an LM head worth 2 layers on 2 GPUs: 7 + (5 + head).
    assert split_layers([1.0] * 12, 2, last_extra=2.0) == [range(0, 7), range(7, 12)]


def test_bad_counts_are_refused_by_name():
    with pytest.raises(ValueError, match="stages"):
        fill_drain(0, 4)
    with pytest.raises(ValueError, match="microbatches"):
        bubble_fraction(2, 0)
    with pytest.raises(ValueError, match="3 layers into 4"):
        split_layers([1, 1, 1], 4)
