"""The measured choice between running a long list of small batches plainly or pipelined
(pipeline/list_paths.py), with run times from session 32's H100 probe (p225, µs a batch)."""

from __future__ import annotations

import numpy as np

from fullpipe.pipeline.list_paths import MAX_KINDS, PIPELINED, PLAIN, PLAIN_MARGIN, TRIALS, WARMUP, ListPaths, list_key


def trial(paths: ListPaths, key: tuple, us: dict[str, list[float]], batches: int = 100) -> list[str]:
    """Runs the trial of ``key`` with the given µs per batch of each path's runs in turn;
    returns the paths it asked for."""
    asked = []
    left = {p: list(v) for p, v in us.items()}
    while paths.in_trial(key):
        path = paths.next_path(key)
        asked.append(path)
        paths.record(key, path, left[path].pop(0) * batches / 1e6, batches)
    return asked


def test_the_trial_alternates_pipelined_first_then_keeps_the_faster():
    paths = ListPaths()
    # x * 2 over 400 batches: plain 78 µs, pipelined 120; the warm-up runs (first of each) not counted
    asked = trial(paths, "x2", {PIPELINED: [900.0, 120.5, 125.0], PLAIN: [300.0, 80.1, 78.2]})
    assert asked == [PIPELINED, PLAIN] * (WARMUP + TRIALS)
    assert [paths.next_path("x2") for _ in range(3)] == [PLAIN] * 3
    # an encoder whose kernels overlap on three streams: pipelined 505, plain 578
    trial(paths, "enc", {PIPELINED: [1050.0, 505.0, 520.0], PLAIN: [900.0, 578.2, 590.0]})
    assert paths.next_path("enc") == PIPELINED
    assert paths.next_path("x2") == PLAIN  # (each kind of list its own choice)


def test_plain_is_kept_only_by_a_margin_of_the_best_runs():
    paths = ListPaths()
    # a plain run slowed by a one-off: the best measured run of each path counts
    trial(paths, "k", {PIPELINED: [0.0, 140.0, 142.0], PLAIN: [0.0, 400.0, 104.0]})
    assert paths.next_path("k") == PLAIN
    d = paths.describe("k", PLAIN, trial=False)
    assert d == {"path": PLAIN, "source": "chosen by the trial (the faster per batch)", "chosen": PLAIN,
                 "plain_us_per_batch": 104.0, "pipelined_us_per_batch": 140.0}
    # plain faster, but by less than the margin (within this host's noise): pipelined stays
    trial(paths, "close", {PIPELINED: [0.0, 100.0, 100.0], PLAIN: [0.0, 90.0, 100.0 * PLAIN_MARGIN + 1]})
    assert paths.next_path("close") == PIPELINED
    trial(paths, "edge", {PIPELINED: [0.0, 100.0, 100.0], PLAIN: [0.0, 100.0 * PLAIN_MARGIN, 99.0]})
    assert paths.next_path("edge") == PLAIN


def test_runs_after_the_choice_change_nothing_and_clear_starts_over():
    paths = ListPaths()
    trial(paths, "k", {PIPELINED: [0.0, 100.0, 100.0], PLAIN: [0.0, 70.0, 75.0]})
    paths.record("k", PIPELINED, 1e-6, 100)  # a much faster pipelined run later: the choice stays
    assert paths.next_path("k") == PLAIN and not paths.in_trial("k")
    paths.clear()
    assert paths.in_trial("k") and paths.next_path("k") == PIPELINED


def test_describe_counts_the_trials_runs():
    paths = ListPaths()
    said = []
    for path, us in [(PIPELINED, 300.0), (PLAIN, 200.0), (PIPELINED, 120.0), (PLAIN, 80.0), (PIPELINED, 118.0),
                     (PLAIN, 79.0)]:
        assert paths.next_path("k") == path
        paths.record("k", path, us * 1e-4, 100)
        said.append(paths.describe("k", path, trial=True))
    assert [d["source"] for d in said[:5]] == [f"trial run {n} of 6" for n in range(1, 6)]
    assert "plain_us_per_batch" not in said[1] and said[3]["plain_us_per_batch"] == 80.0  # (warm-up not counted)
    assert said[5]["source"] == "trial run 6 of 6: from now on plain" and said[5]["chosen"] == PLAIN
    assert "chosen" not in said[4]


def test_the_kinds_remembered_are_bounded():
    paths = ListPaths()
    for k in range(MAX_KINDS + 10):
        paths.record(k, PIPELINED, 1e-3, 10)
    assert len(paths._runs) == len(paths._seen) == MAX_KINDS
    assert paths.next_path(0) == PIPELINED and paths.next_path(MAX_KINDS + 9) == PLAIN  # (0 forgotten: anew)


def test_a_kind_of_list_is_its_dtype_host_kind_and_batch_size_within_two():
    f4 = [np.zeros((n, 64), np.float32) for n in (30, 34, 32)]  # ~8 KiB a batch
    assert list_key(f4, "torch") == list_key([np.zeros((33, 64), np.float32)] * 5, "torch")
    assert list_key(f4, "torch") != list_key(f4, "numpy")
    assert list_key(f4, "torch") != list_key([a.astype(np.float64) for a in f4], "torch")
    assert list_key(f4, "torch") != list_key([np.zeros((128, 64), np.float32)] * 3, "torch")  # 4x the bytes
