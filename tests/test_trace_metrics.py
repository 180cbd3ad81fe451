"""The tracer's interval arithmetic, on hand-made timelines whose answers are worked
out by hand below (times in ns)."""

from __future__ import annotations

import pytest

from fullpipe.trace import Record, Timeline, metrics


def h2d(s, e, nbytes=1000, stream=7, pinned=True, tag=None):
    return Record("memcpy", "copy H2D", s, e, stream=stream, direction="h2d", bytes=nbytes, pinned=pinned, tag=tag)


def d2h(s, e, nbytes=1000, stream=7, pinned=True, tag=None):
    return Record("memcpy", "copy D2H", s, e, stream=stream, direction="d2h", bytes=nbytes, pinned=pinned, tag=tag)


def kernel(s, e, stream=7, tag=None):
    return Record("kernel", "k", s, e, stream=stream, tag=tag)


# ----------------------------------------------------------------------------- primitives
def test_merge_joins_overlapping_and_touching_intervals_and_drops_empty_ones():
    assert metrics.merge([(5, 8), (0, 2), (1, 3), (8, 9), (4, 4), (7, 6)]) == [(0, 3), (5, 9)]


def test_busy_counts_overlap_once():
    # [0,10) and [5,15) overlap on [5,10): union [0,15) = 15, not 10 + 10 = 20.
    assert metrics.busy([(0, 10), (5, 15)]) == 15
    assert metrics.busy([]) == 0


def test_at_least_k_engines():
    a = [(0, 10)]
    b = [(5, 20)]
    c = [(8, 9), (15, 30)]
    # depth over time: 0-5:1 (a), 5-8:2 (a,b), 8-9:3, 9-10:2, 10-15:1 (b), 15-20:2 (b,c), 20-30:1 (c)
    assert metrics.at_least([a, b, c], 1) == 30
    assert metrics.at_least([a, b, c], 2) == 3 + 1 + 1 + 5  # 5-8, 8-9, 9-10, 15-20 = 10
    assert metrics.at_least([a, b, c], 3) == 1
    assert metrics.at_least([a, b, c], 4) == 0
    with pytest.raises(ValueError):
        metrics.at_least([a], 0)


def test_one_engine_overlapping_itself_is_still_one_engine():
    # Two kernels at once on different streams keep one engine (the SMs) busy: with
    # a copy on [0, 4), only [2, 4) has two engines busy.
    sms = [(2, 10), (3, 8)]
    copies = [(0, 4)]
    assert metrics.at_least([sms, copies], 2) == 2


def test_half_open_intervals_that_touch_do_not_overlap():
    assert metrics.both([(0, 5)], [(5, 10)]) == 0
    assert metrics.at_least([[(0, 5)], [(5, 10)]], 1) == 10


def test_gaps_inside_a_window():
    assert metrics.gaps([(2, 4), (6, 7), (6, 8)], 0, 10) == [(0, 2), (4, 6), (8, 10)]
    assert metrics.gaps([(0, 10)], 0, 10) == []
    assert metrics.gaps([], 3, 5) == [(3, 5)]
    assert metrics.gaps([(-5, 1), (9, 20)], 0, 10) == [(1, 9)]  # clipped to the window


# ----------------------------------------------------------------------------- summary
def hand_made() -> Timeline:
    """H2D [0,10) [20,30); kernels on stream 7 [5,25) and stream 8 [8,12) [24,26); D2H [22,40)."""
    return Timeline(records=[
        h2d(0, 10, 1000, tag=0), h2d(20, 30, 1000, stream=8, tag=1),
        kernel(5, 25, stream=7, tag=0), kernel(8, 12, stream=8, tag=1), kernel(24, 26, stream=8, tag=1),
        d2h(22, 40, 3600, stream=7, tag=0),
        Record("sync", "stream synchronize", 0, 100),  # host waiting: not an engine, not in the span
        Record("memory", "alloc (device)", 3, 3, bytes=64),  # an instant: not an engine either
    ], source="test")


def test_summary_of_a_hand_made_timeline():
    s = hand_made().summary()
    # Span: first device start 0 to last device end 40 (the sync's 100 does not count).
    assert s.span_ns == 40
    # H2D busy 10 + 10 = 20; SMs: union of [5,25) [8,12) [24,26) = [5,26) = 21; D2H 18.
    assert (s.engines["h2d"].busy_ns, s.engines["compute"].busy_ns, s.engines["d2h"].busy_ns) == (20, 21, 18)
    assert s.engines["h2d"].busy_fraction == 0.5
    assert s.engines["compute"].ops == 3
    # Busy engines over time: 0-5 H2D (1); 5-10 H2D+SM (2); 10-20 SM (1); 20-22 H2D+SM (2);
    # 22-26 all three (3); 26-30 H2D+D2H (2); 30-40 D2H (1).
    assert s.at_least_1_ns == 40
    assert s.at_least_2_ns == 5 + 2 + 4 + 4 == 15
    assert s.all_3_ns == 4
    assert s.at_least_2_fraction == 15 / 40 and s.all_3_fraction == 4 / 40
    # SMs against either copy engine: [5,10) + [20,26) = 11.
    assert s.copy_compute_overlap_ns == 11
    # SMs idle 40 - 21 = 19, in the gaps [0,5) and [26,40).
    assert s.sm_idle_ns == 19
    assert s.sm_gaps == [(0, 5), (26, 40)] and s.largest_sm_gap_ns() == 14
    # Bytes per ns is GB/s: H2D 2000 B in 20 ns busy = 100 GB/s, over the 40 ns span 50 GB/s.
    assert s.engines["h2d"].bytes == 2000
    assert s.engines["h2d"].gb_per_s_busy == 100.0 and s.engines["h2d"].gb_per_s_span == 50.0
    assert s.engines["d2h"].gb_per_s_busy == 200.0 and s.engines["d2h"].gb_per_s_span == 90.0
    assert s.engines["h2d"].pinned_bytes == 2000 and s.engines["h2d"].pageable_bytes == 0


def test_summary_is_printable_and_serialisable():
    s = hand_made().summary()
    text = str(s)
    assert "h2d" in text and "all 3" in text and "SMs idle" in text
    d = s.as_dict()
    assert d["at_least_2_ns"] == 15 and d["sm_gaps"] == [[0, 5], [26, 40]] and d["largest_sm_gap_ns"] == 14


def test_pageable_copies_and_other_engines_are_reported_apart():
    tl = Timeline(records=[
        h2d(0, 10, 500, pinned=False), h2d(10, 20, 500, pinned=True),
        Record("memcpy", "copy D2D", 0, 4, stream=1, direction="d2d", bytes=400),
        Record("memset", "memset", 4, 6, stream=1, bytes=10),
    ])
    s = tl.summary()
    assert s.engines["h2d"].pageable_bytes == 500 and s.engines["h2d"].pinned_bytes == 500
    assert set(s.other_engines) == {"d2d", "memset"}
    assert s.other_engines["d2d"].gb_per_s_busy == 100.0
    # D2D and memsets are not among the three pipeline engines.
    assert s.at_least_2_ns == 0 and s.engines["compute"].busy_ns == 0
    assert s.sm_idle_ns == 20 and s.sm_gaps == [(0, 20)]


def test_serial_timeline_has_no_overlap():
    # One stream: H2D, kernel, D2H per batch, back to back with small gaps.
    recs = []
    t = 0
    for b in range(3):
        recs += [h2d(t, t + 10, tag=b), kernel(t + 11, t + 21, tag=b), d2h(t + 22, t + 32, tag=b)]
        t += 33
    s = Timeline(records=recs).summary()
    assert s.span_ns == 98
    assert s.at_least_2_ns == 0 and s.copy_compute_overlap_ns == 0
    assert s.at_least_1_ns == 90  # 9 ops x 10 ns
    assert s.engines["compute"].busy_ns == 30 and s.sm_idle_ns == 68


def test_empty_timeline_summary_is_all_zero():
    s = Timeline().summary()
    assert s.span_ns == 0 and s.at_least_2_fraction == 0.0 and s.sm_gaps == []
    assert "span 0.000 ms" in str(s)
