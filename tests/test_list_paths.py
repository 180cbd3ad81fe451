"""The measured choice between running a long list of small batches plainly or pipelined
(pipeline/list_paths.py), with run times from session 32's H100 probe (p225, µs a batch)."""

from __future__ import annotations

import numpy as np

from fullpipe.pipeline.list_paths import (ABANDON_SLOWER, HOST_BOUND_SHARE, MAX_KINDS, PIPELINED, PLAIN, PLAIN_MARGIN,
                                          RECHECK_EVERY, RECHECK_MOST, THREADS, THREADS_MARGIN, TRIALS, WARMUP, ListPaths,
                                          list_key)


def trial(paths: ListPaths, key: tuple, us: dict[str, list[float]], batches: int = 100,
          call_share: float | None = None) -> list[str]:
    """Runs the trial of ``key`` with the given µs per batch of each path's runs in turn;
    returns the paths it asked for. ``call_share``: the pipelined runs' calls' share of
    their time, where the calls may go to threads (None: they may not)."""
    asked = []
    left = {p: list(v) for p, v in us.items()}
    while paths.in_trial(key):
        path = paths.next_path(key, may_thread=call_share is not None)
        asked.append(path)
        seconds = left[path].pop(0) * batches / 1e6
        call_s = None if call_share is None else call_share * seconds
        paths.record(key, path, seconds, batches, call_s)
    return asked


def test_the_trial_alternates_pipelined_first_then_keeps_the_faster():
    paths = ListPaths()
    # x * 2 over 400 batches: plain 78 µs, pipelined 120; the warm-up runs (first of each) not counted
    asked = trial(paths, "x2", {PIPELINED: [900.0, 120.5, 125.0, 118.0], PLAIN: [300.0, 80.1, 78.2, 79.0]})
    assert asked == [PIPELINED, PLAIN] * (WARMUP + TRIALS)
    assert [paths.next_path("x2") for _ in range(3)] == [PLAIN] * 3
    # an encoder whose kernels overlap on three streams: pipelined 505, plain 578
    trial(paths, "enc", {PIPELINED: [1050.0, 505.0, 520.0, 510.0], PLAIN: [900.0, 578.2, 590.0, 575.0]})
    assert paths.next_path("enc") == PIPELINED
    assert paths.next_path("x2") == PLAIN  # (each kind of list its own choice)


def test_plain_is_kept_only_by_a_margin_of_the_typical_runs():
    paths = ListPaths()
    # a plain run slowed by a one-off: the median of each way's measured runs counts
    trial(paths, "k", {PIPELINED: [0.0, 140.0, 142.0, 139.0], PLAIN: [0.0, 400.0, 104.0, 106.0]})
    assert paths.next_path("k") == PLAIN
    d = paths.describe("k", PLAIN, trial=False)
    assert d == {"path": PLAIN, "source": "chosen by each way's latest runs (per batch: the faster, threads at parity; "
                                          f"another way run again every {RECHECK_EVERY}-{RECHECK_MOST} runs: 0 so far)",
                 "chosen": PLAIN, "plain_us_per_batch": 106.0, "pipelined_us_per_batch": 140.0}
    # plain faster, but by less than the margin (within this host's noise): pipelined stays
    trial(paths, "close", {PIPELINED: [0.0, 100.0, 100.0, 100.0], PLAIN: [0.0, 80.0, 100.0 * PLAIN_MARGIN + 1, 90.0]})
    assert paths.next_path("close") == PIPELINED
    trial(paths, "edge", {PIPELINED: [0.0, 100.0, 100.0, 100.0], PLAIN: [0.0, 100.0 * PLAIN_MARGIN, 99.0, 1.0]})
    assert paths.next_path("edge") == PLAIN
    # one lucky run of a way that is slow most of the time does not win it the choice
    # (session 35, the bench's encoder on an H200 host: pipelined 514-902 µs a batch, 490-566 on threads)
    trial(paths, "lucky", {PIPELINED: [0.0, 70.0, 100.0, 100.0], PLAIN: [0.0, 80.0, 80.0, 80.0]})
    assert paths.next_path("lucky") == PLAIN


def test_one_odd_run_after_the_choice_changes_nothing_and_clear_starts_over():
    paths = ListPaths()
    trial(paths, "k", {PIPELINED: [0.0, 100.0, 100.0, 100.0], PLAIN: [0.0, 70.0, 75.0, 72.0]})
    paths.record("k", PIPELINED, 1e-6, 100)  # one much faster pipelined run later: the median stays
    assert paths.next_path("k") == PLAIN and not paths.in_trial("k")
    paths.clear()
    assert paths.in_trial("k") and paths.next_path("k") == PIPELINED


def test_the_choice_follows_each_ways_latest_runs():
    """A trial read in a list's first runs can be wrong (session 51: pipelined kept at 592 µs a
    batch against threads' 618, then 707 in its own later runs): the chosen way's own runs
    renew its median, and the choice moves once it says another way is faster."""
    paths = ListPaths()
    trial(paths, "enc", {PIPELINED: [900.0, 592.0, 590.0, 600.0], PLAIN: [900.0, 640.0, 638.0, 650.0],
                         THREADS: [4e4, 618.0, 620.0, 615.0]}, call_share=0.9)
    assert paths.next_path("enc", may_thread=True) == PIPELINED
    taken = []
    for _ in range(4):
        way = paths.next_path("enc", may_thread=True)
        taken.append(way)
        paths.record("enc", way, 707.0 * 100 / 1e6, 100)
    assert taken == [PIPELINED, PIPELINED, THREADS, THREADS]  # (two runs of 707 move pipelined's median)
    d = paths.describe("enc", THREADS, trial=False)
    assert d["chosen"] == THREADS and d["pipelined_us_per_batch"] == 707.0


def test_another_way_runs_again_now_and_then_less_often_while_it_stays_slower():
    paths = ListPaths()
    trial(paths, "k", {PIPELINED: [0.0, 120.0, 118.0, 121.0], PLAIN: [0.0, 80.0, 79.0, 81.0]})
    asked = []
    for _ in range(8 * RECHECK_EVERY):
        way = paths.next_path("k")
        asked.append(way)
        paths.record("k", way, (125.0 if way == PIPELINED else 80.0) * 1e-4, 100)
    checks = [i + 1 for i, w in enumerate(asked) if w == PIPELINED]
    # (slower each time by more than RECHECK_SLOWER: 16 runs on, then 32, then 64)
    assert checks == [RECHECK_EVERY + 1, 3 * RECHECK_EVERY + 1, 7 * RECHECK_EVERY + 1]
    assert paths.describe("k", PLAIN, trial=False)["source"].endswith("3 so far)")
    # once faster, a check comes again RECHECK_EVERY runs on; two such move the median, and the choice
    fast = []
    for run in range(RECHECK_MOST + 2 * RECHECK_EVERY):
        way = paths.next_path("k")
        if way == PIPELINED:
            fast.append(run)
        paths.record("k", way, (50.0 if way == PIPELINED else 80.0) * 1e-4, 100)
        if paths.describe("k", way, trial=False)["chosen"] == PIPELINED:
            break
    assert len(fast) == 2 and fast[1] - fast[0] == RECHECK_EVERY
    assert [paths.next_path("k") for _ in range(RECHECK_EVERY)] == [PIPELINED] * RECHECK_EVERY  # (plain: later)
    # a check whose run went another way (plain refused for its inputs, or the run raised) comes
    # again at its next time, not at every run after
    paths3 = ListPaths()
    trial(paths3, "k", {PIPELINED: [0.0, 120.0, 118.0, 121.0], PLAIN: [0.0, 80.0, 79.0, 81.0]})
    asked = []
    for _ in range(2 * RECHECK_EVERY + 1):
        asked.append(paths3.next_path("k"))
        paths3.record("k", PLAIN, 80.0 * 1e-4, 100)  # (every run, the check's too, went plainly)
    assert asked.count(PIPELINED) == 2 and asked[RECHECK_EVERY] == PIPELINED
    # the threads' way is not handed out as a check where the calls may not go to threads
    paths2 = ListPaths()
    trial(paths2, "enc", ENCODER, call_share=0.85)
    assert {paths2.next_path("enc", may_thread=False) for _ in range(10 * RECHECK_EVERY)} <= {PIPELINED, PLAIN}


def test_describe_counts_the_trials_runs():
    paths = ListPaths()
    said = []
    for path, us in [(PIPELINED, 300.0), (PLAIN, 200.0), (PIPELINED, 120.0), (PLAIN, 80.0), (PIPELINED, 118.0),
                     (PLAIN, 79.0), (PIPELINED, 121.0), (PLAIN, 81.0)]:
        assert paths.next_path("k") == path
        paths.record("k", path, us * 1e-4, 100)
        said.append(paths.describe("k", path, trial=True))
    assert [d["source"] for d in said[:7]] == [f"trial run {n} of 8" for n in range(1, 8)]
    assert "plain_us_per_batch" not in said[1] and said[3]["plain_us_per_batch"] == 80.0  # (warm-up not counted)
    assert said[5]["plain_us_per_batch"] == 79.5  # (the median so far)
    assert said[7]["source"] == "trial run 8 of 8: from now on plain" and said[7]["chosen"] == PLAIN
    assert "chosen" not in said[6]


def test_the_kinds_remembered_are_bounded():
    paths = ListPaths()
    for k in range(MAX_KINDS + 10):
        paths.record(k, PIPELINED, 1e-3, 10)
    assert len(paths._trials) == MAX_KINDS
    assert paths.next_path(0) == PIPELINED and paths.next_path(MAX_KINDS + 9) == PLAIN  # (0 forgotten: anew)


def test_a_kind_of_list_is_its_dtype_host_kind_and_batch_size_within_two():
    f4 = [np.zeros((n, 64), np.float32) for n in (30, 34, 32)]  # ~8 KiB a batch
    assert list_key(f4, "torch") == list_key([np.zeros((33, 64), np.float32)] * 5, "torch")
    assert list_key(f4, "torch") != list_key(f4, "numpy")
    assert list_key(f4, "torch") != list_key([a.astype(np.float64) for a in f4], "torch")
    assert list_key(f4, "torch") != list_key([np.zeros((128, 64), np.float32)] * 3, "torch")  # 4x the bytes


# Session 35, an H200 host, the bench's encoder layer over 127 token batches (µs a batch):
# pipelined 605-778 with its calls taking 660 of them, plain 567, on 3 compute threads ~511.
ENCODER = {PIPELINED: [1200.0, 605.0, 640.0, 900.0], PLAIN: [900.0, 567.0, 580.0, 600.0],
           THREADS: [43000.0, 515.0, 511.0, 520.0]}


def test_a_list_whose_calls_set_the_pace_measures_threads_too_and_keeps_them_when_clearly_faster():
    paths = ListPaths()
    asked = trial(paths, "enc", ENCODER, call_share=0.85)
    # threads join once the first measured pipelined run showed the calls set the pace
    # (their warm-up run, with cold per-thread caches, is not counted)
    assert asked == [PIPELINED, PLAIN, PIPELINED, THREADS, PLAIN, THREADS] + [PIPELINED, PLAIN, THREADS] * 2
    assert paths.next_path("enc", may_thread=True) == THREADS
    d = paths.describe("enc", THREADS, trial=False)
    assert d["threads_us_per_batch"] == 515.0 and d["pipelined_us_per_batch"] == 640.0
    # where the calls may not go to threads this run (say, inside `with torch.device(...)`): pipelined
    assert paths.next_path("enc", may_thread=False) == PIPELINED
    # plain against the best other way: 580 is not 0.85x of 515
    assert paths.next_path("enc", may_thread=True) == THREADS


def test_a_way_far_slower_in_its_first_measured_run_leaves_the_trial_and_comes_back_rarely():
    """imap over 120 requests through a 2-layer fp16 encoder (session 55, an H200 host, µs a
    batch): threads' first windows ran 29-39 ms a batch against pipelined's 0.6-1.0; each of
    the trial's threads runs cost seconds. One measured run that slow ends the threads' trial."""
    paths = ListPaths()
    slow = {PIPELINED: [1200.0, 967.0, 877.0, 967.0], PLAIN: [1300.0, 1167.0, 925.0, 955.0],
            THREADS: [41000.0, 38654.0]}  # (no more threads' runs may be asked for)
    asked = trial(paths, "req", slow, call_share=0.9)
    assert asked == [PIPELINED, PLAIN, PIPELINED, THREADS, PLAIN, THREADS, PIPELINED, PLAIN, PIPELINED, PLAIN]
    assert paths.describe("req", PLAIN, trial=False)["threads_us_per_batch"] == 38654.0
    # its runs counted as they were: the trial said it would take 12, then 10
    later = [paths.next_path("req", may_thread=True) for _ in range(RECHECK_MOST + 1)]
    assert later.index(THREADS) == RECHECK_MOST - 1 and later.count(THREADS) == 1
    # plain and threads each leave so only beyond the margin: 2.9x stays in the trial
    paths = ListPaths()
    near = {PIPELINED: [0.0, 100.0, 100.0, 100.0], PLAIN: [0.0, 99.0, 99.0, 99.0],
            THREADS: [0.0, 0.99 * ABANDON_SLOWER * 99.0, 98.0, 97.0]}
    asked = trial(paths, "near", near, call_share=0.9)
    assert asked.count(THREADS) == WARMUP + TRIALS and paths.next_path("near", may_thread=True) == THREADS
    paths = ListPaths()
    asked = trial(paths, "plain", {PIPELINED: [0.0, 100.0, 100.0, 100.0], PLAIN: [0.0, 301.0]})
    assert asked == [PIPELINED, PLAIN, PIPELINED, PLAIN, PIPELINED, PIPELINED]
    assert paths.next_path("plain") == PIPELINED


def test_the_trials_count_says_a_way_measured_no_more_ran_fewer_runs():
    paths = ListPaths()
    key, batches = "k", 100
    for path, us in ((PIPELINED, 500.0), (PLAIN, 500.0), (PIPELINED, 500.0), (THREADS, 9000.0), (PLAIN, 500.0),
                     (THREADS, 9000.0)):
        assert paths.next_path(key, may_thread=True) == path
        seconds = us * batches / 1e6
        paths.record(key, path, seconds, batches, 0.9 * seconds if path == PIPELINED else None)
    assert paths.describe(key, THREADS, trial=True)["source"] == "trial run 6 of 10"


def test_threads_are_not_measured_where_the_calls_do_not_set_the_pace_or_may_not_go():
    for share in (HOST_BOUND_SHARE - 0.01, None):
        paths = ListPaths()
        asked = trial(paths, "k", ENCODER, call_share=share)
        assert THREADS not in asked and len(asked) == 2 * (WARMUP + TRIALS)
        assert paths.next_path("k", may_thread=True) == PIPELINED


def test_threads_must_win_by_a_margin_and_plain_must_beat_them_by_its_own():
    paths = ListPaths()
    close = {PIPELINED: [0.0, 100.0, 100.0, 100.0], PLAIN: [0.0, 99.0, 99.0, 99.0],
             THREADS: [0.0, 100.0 * THREADS_MARGIN + 1, 100.0 * THREADS_MARGIN + 0.5, 50.0]}
    trial(paths, "close", close, call_share=0.9)
    assert paths.next_path("close", may_thread=True) == PIPELINED  # (threads slower beyond the noise: no)
    edge = {PIPELINED: [0.0, 100.0, 100.0, 100.0], PLAIN: [0.0, 99.0, 99.0, 99.0],
            THREADS: [0.0, 60.0, 100.0 * THREADS_MARGIN, 100.0 * THREADS_MARGIN + 5]}
    trial(paths, "edge", edge, call_share=0.9)
    assert paths.next_path("edge", may_thread=True) == THREADS  # (at the margin)
    fast = {PIPELINED: [0.0, 100.0, 100.0, 100.0], PLAIN: [0.0, 82.0, 82.0, 82.0],
            THREADS: [0.0, 60.0, 80.0, 81.0]}
    trial(paths, "fast", fast, call_share=0.9)
    assert paths.next_path("fast", may_thread=True) == THREADS  # (plain's 82 is not 0.85x of 80)
    # where the threads may not run this time, the choice between the other two: plain's 82 is 0.82x of 100
    assert paths.next_path("fast", may_thread=False) == PLAIN
    # bench workloads' encoder list on an H200 (session 38): threads 504 us a batch against 557
    # pipelined in the trial (0.905x), 0.83x in the rounds timed after it: threads
    encoder = {PIPELINED: [0.0, 557.0, 557.0, 557.0], PLAIN: [0.0, 565.0, 565.0, 565.0],
               THREADS: [0.0, 504.0, 504.0, 504.0]}
    trial(paths, "encoder", encoder, call_share=0.9)
    assert paths.next_path("encoder", may_thread=True) == THREADS
    # the same list in session 43 (an H200): 497 against 496 in the trial, 0.84x in the rounds after
    # it (pipelined 0.86x compute alone, threads 1.03x): at parity, threads
    parity = {PIPELINED: [0.0, 495.9, 495.9, 495.9], PLAIN: [0.0, 558.3, 558.3, 558.3],
              THREADS: [0.0, 497.1, 497.1, 497.1]}
    trial(paths, "parity", parity, call_share=0.9)
    assert paths.next_path("parity", may_thread=True) == THREADS
    # threads taken slower than pipelined: plain must still beat the faster of the two by its margin
    slower = {PIPELINED: [0.0, 100.0, 100.0, 100.0], PLAIN: [0.0, 85.5, 85.5, 85.5], THREADS: [0.0, 101.0, 101.0, 101.0]}
    trial(paths, "slower", slower, call_share=0.9)
    assert paths.next_path("slower", may_thread=True) == THREADS
    assert paths.next_path("slower", may_thread=False) == PIPELINED
    tiny = {PIPELINED: [0.0, 100.0, 100.0, 100.0], PLAIN: [0.0, 50.0, 50.0, 50.0], THREADS: [0.0, 60.0, 60.0, 60.0]}
    trial(paths, "tiny", tiny, call_share=0.9)
    assert paths.next_path("tiny", may_thread=True) == PLAIN


def test_a_trial_whose_calls_may_no_longer_go_to_threads_ends_without_them():
    paths = ListPaths()
    key, batches = "k", 100
    for path in (PIPELINED, PLAIN, PIPELINED):
        assert paths.next_path(key, may_thread=True) == path
        paths.record(key, path, 500e-6 * batches, batches, 0.9 * 500e-6 * batches if path == PIPELINED else None)
    assert paths.next_path(key, may_thread=True) == THREADS
    # the threads' run failed (the executor then runs the list on one thread) and the
    # pipeline says no more threads: the trial goes on with two ways
    assert paths.next_path(key, may_thread=False) == PLAIN
    paths.record(key, PLAIN, 400e-6 * batches, batches)
    assert paths.next_path(key, may_thread=True) == PIPELINED  # (threads stay out of this trial)
    for path in (PIPELINED, PLAIN, PIPELINED, PLAIN):
        paths.record(key, path, (500e-6 if path == PIPELINED else 400e-6) * batches, batches)
    assert not paths.in_trial(key) and paths.next_path(key, may_thread=True) == PLAIN
    assert paths.describe(key, PLAIN, trial=False)["plain_us_per_batch"] == 400.0


def test_the_trials_count_says_how_many_runs_it_takes_as_the_ways_change():
    paths = ListPaths()
    key, batches = "k", 100
    said = []
    for path, call_share in ((PIPELINED, 0.9), (PLAIN, None), (PIPELINED, 0.9), (THREADS, None)):
        assert paths.next_path(key, may_thread=True) == path
        seconds = 500e-6 * batches
        paths.record(key, path, seconds, batches, None if call_share is None else call_share * seconds)
        said.append(paths.describe(key, path, trial=True)["source"])
    # 8 runs for two ways until the calls were seen to set the pace, then 12
    assert said == ["trial run 1 of 8", "trial run 2 of 8", "trial run 3 of 12", "trial run 4 of 12"]
    # the threads leave the trial (say, a run inside `with torch.device(...)`): their one run still counts
    assert paths.next_path(key, may_thread=False) == PLAIN
    paths.record(key, PLAIN, 400e-6 * batches, batches)
    assert paths.describe(key, PLAIN, trial=True)["source"] == "trial run 5 of 9"


def record_run(paths: ListPaths, key: tuple, path: str, us: float, call_share: float | None, batches: int = 24):
    seconds = us * batches / 1e6
    paths.record(key, path, seconds, batches, None if call_share is None else call_share * seconds, plain=False)


def test_a_list_of_larger_batches_measures_threads_against_pipelined_only():
    """A long list of larger batches never runs plainly: its trial is pipelined alone until a
    measured run shows the calls set the pace, then pipelined against threads (resnet18 over
    lists of images, session 36: 2702 µs a batch pipelined, 1821 on threads)."""
    paths, key = ListPaths(), ("larger batches", "<f4", "torch", 20)
    asked = []
    us = {PIPELINED: [9000.0, 2702.0, 2650.0, 2800.0], THREADS: [30000.0, 1821.0, 1800.0, 1850.0]}
    while paths.in_trial(key):
        path = paths.next_path(key, may_thread=True)
        asked.append(path)
        record_run(paths, key, path, us[path].pop(0), 0.9 if path == PIPELINED else None)
    assert asked == [PIPELINED, PIPELINED, THREADS, THREADS, PIPELINED, THREADS, PIPELINED, THREADS]
    assert paths.next_path(key, may_thread=True) == THREADS
    assert paths.next_path(key, may_thread=False) == PIPELINED  # (never plain, even where threads may not run)
    d = paths.describe(key, THREADS, trial=False)
    assert "plain_us_per_batch" not in d and d["threads_us_per_batch"] == 1821.0
    # calls that do not set the pace: four pipelined runs, and pipelined it stays
    quiet, said = ("larger batches", "<f4", "torch", 22), []
    while paths.in_trial(quiet):
        assert paths.next_path(quiet, may_thread=True) == PIPELINED
        record_run(paths, quiet, PIPELINED, 500.0, 0.2)
        said.append(paths.describe(quiet, PIPELINED, trial=True)["source"])
    assert said == ["trial run 1 of 4", "trial run 2 of 4", "trial run 3 of 4",
                    "trial run 4 of 4: from now on pipelined"]
