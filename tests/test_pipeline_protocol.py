"""The per-batch enqueue protocol (pipeline/protocol.py), seen from the driver: the
calls one batch makes, in order, with the stream each goes on, in every mode
(eager pinned, eager ring, timing events, copy_streams, graph capture and replay),
recorded against the fake drivers of test_pipeline_fakecuda.py and
test_pipeline_graphs.py. The table in docs/notes/2026-11-22-executor-protocol.md
is what these sequences are checked against."""

from __future__ import annotations

import numpy as np
import pytest

from fullpipe.pipeline import StreamPipeline
from fullpipe.pipeline.workload import reference
from tests import test_pipeline_graphs as graphs_base
from tests.test_pipeline_fakecuda import FakeMix, FakePool, _assert_clean

# These tests are of the staging ring: small pageable batches go through it, not in bulk.
pytestmark = pytest.mark.usefixtures("ring_staging")

fake = graphs_base.fake
gfake = graphs_base.gfake

DRIVER_CALLS = ("cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuEventRecord", "cuEventRecordWithFlags",
                "cuStreamWaitEvent", "cuLaunchHostFunc", "cuMemAllocFromPoolAsync", "cuMemFreeAsync",
                "cuGraphLaunch", "cuStreamBeginCapture", "cuStreamEndCapture")
SHORT = {"cuMemcpyHtoDAsync": "h2d", "cuMemcpyDtoHAsync": "d2h", "cuEventRecord": "record",
         "cuEventRecordWithFlags": "record-node", "cuStreamWaitEvent": "wait", "cuLaunchHostFunc": "hostfn",
         "cuMemAllocFromPoolAsync": "graph-alloc", "cuMemFreeAsync": "graph-free", "cuGraphLaunch": "launch",
         "cuStreamBeginCapture": "begin-capture", "cuStreamEndCapture": "end-capture"}


class Recorder:
    """Every per-batch driver call, pool allocation and compute call, as
    (what, stream name[, event name]), once the pipeline's streams are known."""

    def __init__(self, monkeypatch, driver):
        self.raw: list[tuple] = []
        for name in DRIVER_CALLS:
            real = getattr(driver, name, None)
            if real is not None:
                monkeypatch.setattr(driver, name, self._wrap(name, real))
        for name in ("allocate_ptr", "free_ptr"):
            real = getattr(FakePool, name)
            monkeypatch.setattr(FakePool, name, self._wrap_pool(name, real))

    def _wrap(self, name, real):
        def call(*args):
            if name == "cuStreamWaitEvent":
                self.raw.append((SHORT[name], args[0], args[1]))
            elif name.startswith("cuEventRecord"):
                self.raw.append((SHORT[name], args[1], args[0]))
            elif name in ("cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuMemAllocFromPoolAsync"):
                self.raw.append((SHORT[name], args[3] if name != "cuMemAllocFromPoolAsync" else args[2]))
            else:  # cuLaunchHostFunc, cuMemFreeAsync, cuGraphLaunch, capture: the stream first or last
                stream = args[0] if name in ("cuLaunchHostFunc", "cuStreamBeginCapture", "cuStreamEndCapture") \
                    else args[-1]
                self.raw.append((SHORT[name], stream))
            return real(*args)
        return call

    def _wrap_pool(self, name, real):
        def call(pool, *args):
            self.raw.append(("alloc" if name == "allocate_ptr" else "free", args[-1]))
            return real(pool, *args)
        return call

    def compute(self, inner):
        def fn(stream, x, y):
            self.raw.append(("compute", stream))
            inner(stream, x, y)
        return fn

    def named(self, pipe) -> list[tuple]:
        n = pipe.n_streams
        streams = {id(s): f"s{k}" for k, s in enumerate(pipe.streams)}
        if pipe.copy_streams:
            streams[id(pipe._all_streams[n])] = "in"
            streams[id(pipe._all_streams[n + 1])] = "out"
        events = {id(pipe._start_event): "start", id(pipe._end_event): "end"}
        events.update({id(e): "join" for e in pipe._join_events})
        events[id(pipe._handoff[0])] = "h2d_done"
        events.update({id(e): "compute_done" for e in pipe._handoff[1:1 + n]})
        events.update({id(e): "done" for e in pipe._handoff[1 + n:]})
        out = []
        for what, stream, *ev in self.raw:
            row = (what, streams.get(id(stream), "?"))
            if ev:
                row += (events.get(id(ev[0]), "timing"),)
            out.append(row)
        return out


def one_batch(rec, pipe):
    """The calls of the run's one batch: from its allocation to the first join event."""
    calls = rec.named(pipe)
    first = next(k for k, c in enumerate(calls) if c[0] in ("alloc", "graph-alloc", "begin-capture", "launch"))
    last = next(k for k, c in enumerate(calls) if len(c) > 2 and c[2] in ("join", "end"))
    return calls[first:last]


def run_one(fake, monkeypatch, pinned, **options):
    rec = Recorder(monkeypatch, fake.driver)
    x = np.arange(1000, dtype=np.uint32)
    out = np.zeros_like(x)
    if pinned:
        fake.pinned.update({x.ctypes.data, out.ctypes.data})
    pipe = StreamPipeline(rec.compute(FakeMix(2)), streams=1, chunk=1000, **options)
    pipe.run(x, out=out)
    np.testing.assert_array_equal(out, reference(x, 2))
    return rec, pipe


def test_eager_pinned(fake, monkeypatch):
    rec, pipe = run_one(fake, monkeypatch, pinned=True, timing=False)
    assert one_batch(rec, pipe) == [
        ("alloc", "s0"), ("h2d", "s0"), ("compute", "s0"), ("d2h", "s0"), ("free", "s0")]
    _assert_clean(pipe)


@pytest.mark.parametrize("recycle", ["hostfn", "event"])
def test_eager_ring_signals_each_slot_after_its_copy(fake, monkeypatch, recycle):
    rec, pipe = run_one(fake, monkeypatch, pinned=False, timing=False, recycle=recycle)
    signal = ("hostfn", "s0") if recycle == "hostfn" else ("record", "s0", "timing")  # an EventSignal's own event
    assert one_batch(rec, pipe) == [
        ("alloc", "s0"), ("h2d", "s0"), signal, ("compute", "s0"), ("d2h", "s0"), signal, ("free", "s0")]
    _assert_clean(pipe)


def test_timing_events_around_each_stage(fake, monkeypatch):
    rec, pipe = run_one(fake, monkeypatch, pinned=True, timing=True)
    t = ("record", "s0", "timing")
    assert one_batch(rec, pipe) == [
        ("alloc", "s0"), t, ("h2d", "s0"), t, ("compute", "s0"), t, ("d2h", "s0"), t, ("free", "s0")]
    assert len(pipe.stats.timings) == 1
    _assert_clean(pipe)


def test_copy_streams_routes_copies_and_joins_with_events(fake, monkeypatch):
    rec, pipe = run_one(fake, monkeypatch, pinned=True, timing=False, copy_streams=True)
    assert one_batch(rec, pipe) == [
        ("alloc", "in"), ("h2d", "in"),
        ("record", "in", "h2d_done"), ("wait", "s0", "h2d_done"),
        ("compute", "s0"),
        ("record", "s0", "compute_done"), ("wait", "out", "compute_done"),
        ("d2h", "out"), ("record", "out", "done"),
        ("free", "out"),  # the end of the run: deferred frees go behind every D2H
    ]
    _assert_clean(pipe)


def test_copy_streams_frees_lagged_buffers_on_the_h2d_stream(fake, monkeypatch):
    rec = Recorder(monkeypatch, fake.driver)
    x = np.arange(10 * 100, dtype=np.uint32)
    out = np.zeros_like(x)
    fake.pinned.update({x.ctypes.data, out.ctypes.data})
    pipe = StreamPipeline(rec.compute(FakeMix(1)), streams=2, chunk=100, timing=False, copy_streams=True)
    pipe.run(x, out=out)
    np.testing.assert_array_equal(out, reference(x, 1))
    calls = rec.named(pipe)
    allocs = [k for k, c in enumerate(calls) if c[0] == "alloc"]
    lag = pipe._lag
    for j, k in enumerate(allocs):  # batch j >= lag first waits for batch j - lag's D2H, frees it on "in"
        before = calls[k - 2:k]
        if j >= lag:
            assert before == [("wait", "in", "done"), ("free", "in")], (j, before)
        else:
            assert ("free", "in") not in before
    assert [c for c in calls if c[0] == "free"].count(("free", "out")) == lag
    _assert_clean(pipe)


@pytest.mark.parametrize("pinned", [False, True])
def test_graph_capture_is_the_same_sequence_on_the_captured_stream(gfake, monkeypatch, pinned):
    rec = Recorder(monkeypatch, gfake.driver)
    x = np.arange(3000, dtype=np.uint32)
    out = np.zeros_like(x)
    if pinned:
        gfake.pinned.update({x.ctypes.data, out.ctypes.data})
    with StreamPipeline(rec.compute(FakeMix(2)), streams=1, slots=1, chunk=1000, graph=True) as pipe:
        pipe.run(x, out=out)
        np.testing.assert_array_equal(out, reference(x, 2))
        calls = rec.named(pipe)
    first = calls.index(("begin-capture", "s0"))
    signal = [] if pinned else [("hostfn", "s0")]
    # captured once, then every batch (the first one too) is one launch of its graph. Ring
    # staging: the batch's memory is graph memory (alloc and free nodes); direct staging:
    # the stream's own pool buffer, allocated before the capture
    mem = ([], []) if pinned else ([("graph-alloc", "s0")], [("graph-free", "s0")])
    assert calls[first:first + 6 + 2 * len(signal) + 2 * len(mem[0])] == (
        [("begin-capture", "s0")] + mem[0] + [("h2d", "s0")] + signal
        + [("compute", "s0"), ("d2h", "s0")] + signal
        + mem[1] + [("end-capture", "s0"), ("launch", "s0")])
    assert [c for c in calls if c[0] in ("launch", "alloc", "compute")] == (
        ([("alloc", "s0")] if pinned else []) + [("compute", "s0")] + [("launch", "s0")] * 3)
