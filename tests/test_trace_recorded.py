"""The metrics on traces recorded from a real GPU (tests/data/traces/, written by
scripts/record-test-traces and committed). Each expected number is derived by hand
from the raw records in the test itself, independently of fullpipe.trace.metrics:

- serial: one stream runs one operation at a time, so every union is a plain sum
  of durations and nothing overlaps;
- overlapped: an independent brute-force count over every elementary segment
  between two consecutive timestamps;
- known pattern: the kernel, waiting on the upload's event, starts after it ends.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fullpipe.trace import load

DATA = Path(__file__).parent / "data" / "traces"


def recorded(name: str):
    path = DATA / f"{name}.json"
    if not path.is_file():
        pytest.skip(f"{path} not recorded yet (run scripts/record-test-traces on a GPU and commit it)")
    return load(path)


def pipeline_ops(tl, engine):
    return [r for r in tl.device_records() if r.engine == engine]


def brute_force(tl):
    """Per elementary segment: which of the three engines are busy. Returns
    (>=1, >=2, all 3, compute&copy, busy per engine)."""
    engines = {e: [(r.start_ns, r.end_ns) for r in pipeline_ops(tl, e)] for e in ("h2d", "compute", "d2h")}
    cuts = sorted({t for ivs in engines.values() for iv in ivs for t in iv})
    ge1 = ge2 = all3 = overlap = 0
    per = dict.fromkeys(engines, 0)
    for a, b in zip(cuts, cuts[1:]):
        on = {e for e, ivs in engines.items() if any(s <= a and b <= t for s, t in ivs)}
        n = len(on)
        ge1 += (b - a) * (n >= 1)
        ge2 += (b - a) * (n >= 2)
        all3 += (b - a) * (n == 3)
        overlap += (b - a) * ("compute" in on and bool(on & {"h2d", "d2h"}))
        for e in on:
            per[e] += b - a
    return ge1, ge2, all3, overlap, per


def test_serial_trace_by_hand():
    tl = recorded("serial")
    assert tl.problems() == []
    h2d, k, d2h = (pipeline_ops(tl, e) for e in ("h2d", "compute", "d2h"))
    assert len(h2d) == len(k) == len(d2h) >= 4
    assert len({r.stream for r in h2d + k + d2h}) == 1
    ops = sorted(h2d + k + d2h, key=lambda r: r.start_ns)
    span = ops[-1].end_ns - ops[0].start_ns
    s = tl.summary()
    assert s.span_ns == span
    # One operation at a time: busy = sum of durations, and no two engines ever at once.
    for engine, recs in (("h2d", h2d), ("compute", k), ("d2h", d2h)):
        assert s.engines[engine].busy_ns == sum(r.duration_ns for r in recs)
        assert s.engines[engine].bytes == sum(r.bytes or 0 for r in recs if r.kind == "memcpy")
    assert s.at_least_1_ns == sum(r.duration_ns for r in ops)
    assert s.at_least_2_ns == 0 and s.all_3_ns == 0 and s.copy_compute_overlap_ns == 0
    assert s.sm_idle_ns == span - sum(r.duration_ns for r in k)
    # The pipeline order holds: each batch's H2D, kernel, D2H in turn.
    assert [r.engine for r in ops[:3]] == ["h2d", "compute", "d2h"]
    if tl.source == "cupti":
        assert all(r.pinned is True for r in h2d + d2h)


def test_overlapped_trace_matches_a_brute_force_count():
    tl = recorded("overlapped")
    assert tl.problems() == []
    s = tl.summary()
    ge1, ge2, all3, overlap, per = brute_force(tl)
    assert (s.at_least_1_ns, s.at_least_2_ns, s.all_3_ns, s.copy_compute_overlap_ns) == (ge1, ge2, all3, overlap)
    assert {e: s.engines[e].busy_ns for e in per} == per
    assert len({r.stream for r in pipeline_ops(tl, "compute")}) == 3
    # What the recording showed: a balanced 3-stream pipeline keeps two or more engines
    # busy most of the time, and the serial one never does.
    assert s.at_least_2_fraction > 0.5
    assert s.at_least_2_fraction > recorded("serial").summary().at_least_2_fraction


def test_known_pattern_order():
    tl = recorded("known-pattern")
    assert tl.problems() == []
    (up,) = pipeline_ops(tl, "h2d")
    (k,) = pipeline_ops(tl, "compute")
    assert up.stream != k.stream
    assert up.end_ns <= k.start_ns
    assert tl.streams.get(up.stream) == "upload" and tl.streams.get(k.stream) == "compute"


def test_serial_trace_numbers_written_out():
    """The serial H200 recording, with its numbers copied from the raw records and
    added up by hand: 8 batches of 8 MiB each way on one stream."""
    s = recorded("serial").summary()
    h2d = [153632, 153697, 153569, 153473, 153505, 154977, 153569, 153472]
    d2h = [152769, 152704, 152896, 152736, 152577, 152929, 152673, 152609]
    kernels = [151329, 151585, 151297, 151297, 151232, 151232, 151232, 151264]
    assert sum(h2d) == 1_229_894 and sum(d2h) == 1_221_893 and sum(kernels) == 1_210_468
    assert s.engines["h2d"].busy_ns == 1_229_894
    assert s.engines["d2h"].busy_ns == 1_221_893
    assert s.engines["compute"].busy_ns == 1_210_468
    assert s.span_ns == 3_767_695
    # Nothing runs at once on one stream, so busy time adds up and two engines never overlap.
    assert s.at_least_1_ns == 1_229_894 + 1_221_893 + 1_210_468  # = 3_662_255
    assert s.at_least_2_ns == 0 and s.copy_compute_overlap_ns == 0
    # SMs idle = span - kernel time = 3_767_695 - 1_210_468.
    assert s.sm_idle_ns == 2_557_227
    # 8 x 8 MiB = 67_108_864 bytes in 1_229_894 ns busy: 54.56 GB/s while the H2D engine worked.
    assert s.engines["h2d"].bytes == 67_108_864
    assert abs(s.engines["h2d"].gb_per_s_busy - 67_108_864 / 1_229_894) < 1e-9
