"""The timeline model, its JSON file, the Perfetto export and the PNG, on CPU."""

from __future__ import annotations

import json

import pytest

from fullpipe.trace import Record, Timeline, load
from fullpipe.trace.export import trace_events


def sample() -> Timeline:
    return Timeline(records=[
        Record("memcpy", "copy H2D", 1_000, 2_500, stream=13, direction="h2d", bytes=3000, pinned=True, tag=0),
        Record("kernel", "fp_trace_work", 2_500, 4_000, stream=13, tag=0, info={"grid": [1056, 1, 1]}),
        Record("memcpy", "copy H2D", 2_500, 4_000, stream=14, direction="h2d", bytes=3000, pinned=False, tag=1),
        Record("kernel", "fp_trace_work", 4_000, 5_000, stream=14, tag=1),
        Record("memcpy", "copy D2H", 4_000, 5_500, stream=13, direction="d2h", bytes=3000, pinned=True, tag=0),
        Record("sync", "stream synchronize", 900, 6_000, stream=13),
        Record("memory", "alloc (device)", 950, 950, bytes=1 << 20, info={"pool": "local"}),
    ], source="cupti", device="Test GPU", notes=["a note"], streams={13: "pipeline stream 0"})


# ----------------------------------------------------------------------------- model
def test_record_validates_kind_and_direction():
    with pytest.raises(ValueError, match="kind"):
        Record("launch", "x", 0, 1)
    with pytest.raises(ValueError, match="direction"):
        Record("memcpy", "x", 0, 1, direction="sideways")


def test_engines_of_records():
    tl = sample()
    assert [r.engine for r in tl.records] == ["h2d", "compute", "h2d", "compute", "d2h", "host", None]
    assert tl.span_ns() == (1_000, 5_500)  # the sync and the allocation are not device work
    assert tl.stream_ids() == [13, 14]
    assert tl.stream_label(13) == "stream 13 (pipeline stream 0)" and tl.stream_label(14) == "stream 14"


def test_own_json_round_trip(tmp_path):
    tl = sample()
    path = tl.dump(tmp_path / "t.json")
    again = load(path)
    assert again.as_dict() == tl.as_dict()
    assert again.streams == {13: "pipeline stream 0"}
    copies = [r for r in again.records if r.kind == "memcpy"]
    assert [r.pinned for r in copies] == [True, False, True]  # sorted by start on the way out


def test_loading_a_perfetto_file_says_what_it_is(tmp_path):
    path = sample().save(tmp_path / "p.json")
    with pytest.raises(ValueError, match="not a fullpipe timeline"):
        load(path)
    (tmp_path / "bad.json").write_text("{oops")
    with pytest.raises(ValueError, match="not JSON"):
        load(tmp_path / "bad.json")


def test_problems_finds_impossible_timestamps():
    assert sample().problems() == []
    tl = Timeline(records=[
        Record("kernel", "a", 0, 10, stream=1),
        Record("kernel", "b", 5, 12, stream=1),  # same stream, starts before a ends
        Record("kernel", "c", 5, 12, stream=2),  # another stream: fine
        Record("memcpy", "d", 20, 15, stream=3, direction="h2d"),  # ends before it starts
    ])
    problems = tl.problems()
    assert len(problems) == 2
    assert any("stream 1" in p and "5 ns before" in p for p in problems)
    assert any("ends before it starts" in p for p in problems)


def test_shifted_starts_at_zero_and_keeps_durations():
    tl = sample().shifted()
    assert min(r.start_ns for r in tl.records) == 0
    assert [r.duration_ns for r in tl.records] == [r.duration_ns for r in sample().records]
    assert tl.summary().as_dict() == sample().summary().as_dict()


# ----------------------------------------------------------------------------- Perfetto
def test_trace_event_json_is_valid_trace_event_format(tmp_path):
    path = sample().save(tmp_path / "trace.json")
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    assert doc["displayTimeUnit"] in ("ms", "ns")
    for ev in events:
        assert ev["ph"] in ("X", "i", "M")
        assert isinstance(ev["pid"], int) and isinstance(ev["tid"], int)
        if ev["ph"] == "X":
            assert isinstance(ev["ts"], float) and isinstance(ev["dur"], float) and ev["dur"] >= 0
            assert ev["name"] and ev["cat"]
        if ev["ph"] == "i":
            assert ev["s"] in ("g", "p", "t")
    complete = [e for e in events if e["ph"] == "X"]
    assert len(complete) == 6 and len([e for e in events if e["ph"] == "i"]) == 1
    # Microseconds relative to the first record (the sync at 900 ns): the first copy
    # starts 0.1 us later and lasts 1.5 us.
    first = next(e for e in complete if e["cat"] == "memcpy")
    assert first["ts"] == pytest.approx(0.1) and first["dur"] == pytest.approx(1.5)
    assert first["args"]["GB/s"] == 2.0 and first["args"]["host memory"] == "pinned"
    # Rows: one process per engine, named and ordered; one thread per stream, named.
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert procs[1] == "H2D copy engine" and procs[2] == "SMs (kernels)" and procs[3] == "D2H copy engine"
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e["ph"] == "M" and e["name"] == "thread_name"}
    assert threads[(2, 13)] == "stream 13 (pipeline stream 0)" and threads[(2, 14)] == "stream 14"
    # Every event's row has a name.
    for e in complete:
        assert (e["pid"], e["tid"]) in threads


def test_trace_events_of_an_empty_timeline():
    doc = trace_events(Timeline())
    assert doc["traceEvents"] == []


# ----------------------------------------------------------------------------- PNG
@pytest.mark.parametrize("color_by", ["auto", "kind", "tag"])
def test_plot_writes_a_png(tmp_path, color_by):
    pytest.importorskip("matplotlib")
    path = sample().plot(tmp_path / f"g-{color_by}.png", title="sample", color_by=color_by)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_plot_of_a_timeline_without_kernels_or_tags(tmp_path):
    pytest.importorskip("matplotlib")
    tl = Timeline(records=[Record("memcpy", "copy D2D", 0, 10, stream=1, direction="d2d", bytes=10)],
                  source="events")
    assert tl.plot(tmp_path / "empty.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="color_by"):
        tl.plot(tmp_path / "x.png", color_by="rainbow")
