"""The capture's life cycle on CPU: the fallback when CUPTI is missing, the hook's
rules, and the CUPTI record conversion driven by a stand-in for cupti-python (the
same calls and record fields as cupti-python 13.0's cupti.pyi)."""

from __future__ import annotations

import enum
import importlib
import types

import pytest

from fullpipe import trace
from fullpipe.trace import activity

# The submodule, not the function of the same name that fullpipe.trace exports.
capture_mod = importlib.import_module("fullpipe.trace.capture")


@pytest.fixture(autouse=True)
def _no_gpu_wait(monkeypatch):
    monkeypatch.setattr(capture_mod, "_synchronize_gpu", lambda: [])


def _missing_cupti():
    raise ImportError("cupti-python is not importable (test)")


# ----------------------------------------------------------------------------- fallback and rules
def test_auto_falls_back_to_events_and_says_why(monkeypatch):
    monkeypatch.setattr(activity, "load_cupti", _missing_cupti)
    with trace.capture() as tl:
        assert trace.current() is tl and tl.backend == "events"
    assert trace.current() is None
    assert tl.records == [] and tl.timeline.source == "events"
    assert any("coarse timeline" in n and "not importable (test)" in n for n in tl.notes)
    assert tl.summary().span_ns == 0


def test_backend_cupti_without_cupti_is_an_error(monkeypatch):
    monkeypatch.setattr(activity, "load_cupti", _missing_cupti)
    with pytest.raises(RuntimeError, match="CUPTI tracing is not available"):
        with trace.capture("cupti"):
            pass
    assert trace.current() is None


def test_bad_backend_and_bad_stamp_kind():
    with pytest.raises(ValueError, match="backend"):
        trace.capture("nsys")
    with pytest.raises(ValueError, match="stamp kind"):
        with trace.stamp("upload", stream=None):
            pass
    with trace.capture("events"):
        with pytest.raises(ValueError, match="stamp kind"):
            with trace.stamp("upload", stream=None):
                pass


def test_captures_do_not_nest():
    with trace.capture("events") as outer:
        with pytest.raises(RuntimeError, match="do not nest"):
            with trace.capture("events"):
                pass
        assert trace.current() is outer
    assert trace.current() is None


def test_hook_without_a_capture_is_a_no_op():
    ran = []
    with trace.stamp("kernel", stream=None, tag=3):
        with trace.tag("x"):
            trace.name_stream(object(), "ignored")
            ran.append(1)
    assert ran == [1]


def test_results_only_after_the_block_and_errors_propagate():
    cap = trace.capture("events")
    with pytest.raises(KeyError):
        with cap:
            with pytest.raises(RuntimeError, match="still running"):
                cap.summary()
            raise KeyError("user error")
    assert trace.current() is None and cap.timeline is not None


# ----------------------------------------------------------------------------- CUPTI, stood in for
class FakeCupti:
    """The parts of cupti.cupti the tracer uses, delivering records it is given."""

    class ActivityKind(enum.IntEnum):
        MEMCPY = 1
        MEMSET = 2
        KERNEL = 3
        DRIVER = 4
        CONCURRENT_KERNEL = 10
        EXTERNAL_CORRELATION = 36
        SYNCHRONIZATION = 38
        MEMORY2 = 49
        MEMORY_POOL = 50

    class ActivityMemcpyKind(enum.IntEnum):
        UNKNOWN = 0
        HTOD = 1
        DTOH = 2
        DTOD = 8

    class ActivityMemoryKind(enum.IntEnum):
        UNKNOWN = 0
        PAGEABLE = 1
        PINNED = 2
        DEVICE = 3

    class ActivitySynchronizationType(enum.IntEnum):
        UNKNOWN = 0
        EVENT_SYNCHRONIZE = 1
        STREAM_WAIT_EVENT = 2
        STREAM_SYNCHRONIZE = 3
        CONTEXT_SYNCHRONIZE = 4

    class ActivityMemoryOperationType(enum.IntEnum):
        INVALID = 0
        ALLOCATION = 1
        RELEASE = 2

    class ActivityMemoryPoolType(enum.IntEnum):
        INVALID = 0
        LOCAL = 1

    class ActivityMemoryPoolOperationType(enum.IntEnum):
        INVALID = 0
        CREATED = 1
        DESTROYED = 2
        TRIMMED = 3

    class ExternalCorrelationKind(enum.IntEnum):
        INVALID = 0
        UNKNOWN = 1
        OPENACC = 2
        CUSTOM0 = 3

    def __init__(self, unsupported=()):
        self.unsupported = set(unsupported)
        self.enabled: list = []
        self.callbacks = None
        self.pending: list = []
        self.flushes: list[int] = []
        self.ext_stack: list[int] = []
        self.next_corr = 100

    # --- the API
    def activity_register_callbacks(self, requested, completed):
        self.callbacks = (requested, completed)

    def finalize(self):
        # CUPTI detaches: nothing stays enabled or registered (asserted: the tracer flushed
        # and disabled first)
        assert self.enabled == [] and self.pending == []
        self.finalized = getattr(self, "finalized", 0) + 1
        self.callbacks = None

    def activity_enable(self, kind):
        if kind in self.unsupported:
            raise RuntimeError("CUPTI_ERROR_NOT_SUPPORTED")
        self.enabled.append(kind)

    def activity_disable(self, kind):
        self.enabled.remove(kind)

    def activity_flush_all(self, flag):
        self.flushes.append(flag)
        size, max_records = self.callbacks[0]()
        assert size >= 1 << 20 and max_records == 0
        self.callbacks[1](self.pending)
        self.pending = []

    def get_timestamp(self):
        return 5_000

    def get_stream_id_ex(self, context, stream, per_thread):
        return 40 + stream

    def activity_push_external_correlation_id(self, kind, ext):
        assert kind == self.ExternalCorrelationKind.CUSTOM0
        self.ext_stack.append(ext)

    def activity_pop_external_correlation_id(self, kind):
        return self.ext_stack.pop()

    # --- what the GPU "did": one API call with its activity record(s)
    def api_call(self, record_kind, **fields):
        corr = self.next_corr
        self.next_corr += 1
        if self.ext_stack and self.ActivityKind.EXTERNAL_CORRELATION in self.enabled:
            self.pending.append(types.SimpleNamespace(
                kind=int(self.ActivityKind.EXTERNAL_CORRELATION), correlation_id=corr,
                external_id=self.ext_stack[-1], external_kind=int(self.ExternalCorrelationKind.CUSTOM0)))
        self.pending.append(types.SimpleNamespace(kind=int(self.ActivityKind.DRIVER), correlation_id=corr))
        self.pending.append(types.SimpleNamespace(kind=int(record_kind), correlation_id=corr, **fields))


def kernel_fields(start, end, stream):
    return dict(name="fp_trace_work", start=start, end=end, stream_id=stream, grid_x=1056, grid_y=1, grid_z=1,
                block_x=256, block_y=1, block_z=1, registers_per_thread=32, static_shared_memory=0,
                dynamic_shared_memory=0)


def memcpy_fields(start, end, stream, copy_kind, src, dst, nbytes):
    return dict(start=start, end=end, stream_id=stream, copy_kind=int(copy_kind), src_kind=int(src),
                dst_kind=int(dst), bytes=nbytes)


@pytest.fixture
def fake_cupti(monkeypatch):
    fake = FakeCupti(unsupported={FakeCupti.ActivityKind.MEMORY_POOL})
    monkeypatch.setattr(activity, "load_cupti", lambda: fake)
    monkeypatch.setattr(activity, "_registered", False)
    monkeypatch.setattr(activity, "_sink", None)
    return fake


def test_cupti_capture_converts_records(fake_cupti):
    f = fake_cupti
    K, M, Mem = f.ActivityKind, f.ActivityMemcpyKind, f.ActivityMemoryKind
    s1, s2 = types.SimpleNamespace(handle=1), types.SimpleNamespace(handle=2)
    with trace.capture() as tl:
        assert tl.backend == "cupti"
        assert set(f.enabled) == {K.CONCURRENT_KERNEL, K.MEMCPY, K.MEMSET, K.SYNCHRONIZATION, K.MEMORY2,
                                  K.EXTERNAL_CORRELATION, K.DRIVER}
        trace.name_stream(s1, "upload")
        assert tl.stream_id(s2) == 42
        with trace.stamp("h2d", s1, tag=0):
            f.api_call(K.MEMCPY, **memcpy_fields(1_000, 2_000, 41, M.HTOD, Mem.PINNED, Mem.DEVICE, 4096))
        with trace.tag("batch 1"):
            with trace.stamp("kernel", s2):  # inherits the enclosing tag
                f.api_call(K.CONCURRENT_KERNEL, **kernel_fields(2_100, 3_000, 42))
        f.api_call(K.MEMCPY, **memcpy_fields(3_000, 3_500, 42, M.DTOH, Mem.DEVICE, Mem.PAGEABLE, 1024))
        f.api_call(K.MEMSET, start=3_600, end=3_700, stream_id=42, bytes=64, value=0)
        f.api_call(K.CONCURRENT_KERNEL, **kernel_fields(0, 0, 42))  # incomplete: dropped, counted
        f.api_call(K.SYNCHRONIZATION, start=3_000, end=3_900, stream_id=42,
                   type=int(f.ActivitySynchronizationType.STREAM_SYNCHRONIZE))
        f.api_call(K.SYNCHRONIZATION, start=6_000, end=6_100, stream_id=0,  # after stop: the capture's own
                   type=int(f.ActivitySynchronizationType.CONTEXT_SYNCHRONIZE))
        f.api_call(K.MEMORY2, timestamp=900, memory_operation_type=int(f.ActivityMemoryOperationType.ALLOCATION),
                   memory_kind=int(Mem.DEVICE), bytes=4096, address=0xABC, stream_id=42, is_async=1,
                   memory_pool_config=types.SimpleNamespace(memory_pool_type=int(f.ActivityMemoryPoolType.LOCAL)))
        assert f.ext_stack == []  # every push was popped
    assert f.flushes == [1] and f.enabled == []  # forced flush, then all disabled
    assert activity._sink is None

    recs = {(r.kind, r.direction): r for r in tl.records}
    up = recs[("memcpy", "h2d")]
    assert (up.start_ns, up.end_ns, up.stream, up.bytes, up.pinned, up.tag) == (1_000, 2_000, 41, 4096, True, 0)
    k = recs[("kernel", None)]
    assert k.name == "fp_trace_work" and k.tag == "batch 1" and k.info["grid"] == [1056, 1, 1]
    down = recs[("memcpy", "d2h")]
    assert down.pinned is False and down.tag is None
    assert recs[("memset", None)].bytes == 64
    syncs = [r for r in tl.records if r.kind == "sync"]
    assert [s.name for s in syncs] == ["stream synchronize"]
    mem = recs[("memory", None)]
    assert mem.name == "alloc (device)" and mem.info["pool"] == "local" and mem.is_instant
    assert len([r for r in tl.records if r.kind == "kernel"]) == 1
    assert tl.timeline.streams == {41: "upload"}
    assert any("MEMORY_POOL" in n for n in tl.notes)  # the unsupported optional kind is a note
    assert any("1 CUPTI records had no timestamps" in n for n in tl.notes)
    assert tl.problems() == []
    s = tl.summary()
    assert s.engines["h2d"].gb_per_s_busy == 4.096 and s.copy_compute_overlap_ns == 0


def test_cupti_without_tags_enables_no_driver_records(fake_cupti):
    K = fake_cupti.ActivityKind
    with trace.capture(tags=False):
        assert K.DRIVER not in fake_cupti.enabled and K.EXTERNAL_CORRELATION not in fake_cupti.enabled
        with trace.tag(1):
            assert fake_cupti.ext_stack == []


def test_cupti_detaches_after_each_capture_and_attaches_again(fake_cupti):
    """After a capture CUPTI is detached (cuptiFinalize), not just disabled: an attached
    CUPTI kept slowing the process's CUDA calls after the capture ended. The next
    capture registers its callbacks again and still gets its records."""
    f = fake_cupti
    K = f.ActivityKind
    for i in range(2):
        with trace.capture(tags=False) as tl:
            f.api_call(K.CONCURRENT_KERNEL, **kernel_fields(1_000 + i, 2_000 + i, 7))
        assert f.finalized == i + 1 and f.callbacks is None and f.enabled == []
        assert [r.name for r in tl.timeline.device_records()] == ["fp_trace_work"]


def test_cupti_that_cannot_trace_kernels_falls_back(monkeypatch, fake_cupti):
    fake_cupti.unsupported.add(FakeCupti.ActivityKind.CONCURRENT_KERNEL)
    with trace.capture() as tl:
        assert tl.backend == "events"
    assert fake_cupti.enabled == [] and activity._sink is None
    assert any("CUPTI_ERROR_NOT_SUPPORTED" in n for n in tl.notes)


# ----------------------------------------------------------------------------- the event fallback
class FakeEvent:
    def __init__(self, t_ns):
        self.t_ns = t_ns
        self.synced = False

    def sync(self):
        self.synced = True


def test_event_fallback_turns_stamps_into_records(monkeypatch):
    """Events get GPU times from a script; the first stamp issued is not the first to
    run (stream 2 was idle), so times are shifted to start at the earliest event."""
    import fullpipe.cuda.events as events
    import fullpipe.cuda.streams as streams

    script = iter([5_000, 9_000,     # h2d on s1: [5000, 9000)
                   2_000, 4_000,     # kernel on s2: ran earlier
                   9_000, 12_500])   # d2h on s1
    made = []

    def fake_record(stream, event=None, *, timing=False):
        assert timing
        made.append(FakeEvent(next(script)))
        return made[-1]

    monkeypatch.setattr(events, "record", fake_record)
    monkeypatch.setattr(events, "elapsed_ms", lambda a, b: (b.t_ns - a.t_ns) / 1e6)
    monkeypatch.setattr(streams, "as_core_stream", lambda s: s)
    s1, s2 = types.SimpleNamespace(handle=0x111), types.SimpleNamespace(handle=0x222)
    with trace.capture("events") as tl:
        trace.name_stream(s2, "compute")
        with trace.stamp("h2d", s1, tag=0, nbytes=4000):
            pass
        with trace.tag(1):
            with trace.stamp("kernel", s2, name="my_kernel"):
                pass
        with trace.stamp("d2h", s1, tag=0, nbytes=7000):
            pass
    assert all(e.synced for e in made[1::2])  # every end event waited for
    got = [(r.kind, r.direction, r.name, r.stream, r.start_ns, r.end_ns, r.bytes, r.tag) for r in tl.records]
    # Stream ids in order of first use: s2 was named first -> 1, s1 -> 2.
    assert got == [
        ("memcpy", "h2d", "copy H2D", 2, 3_000, 7_000, 4000, 0),
        ("kernel", None, "my_kernel", 1, 0, 2_000, None, 1),
        ("memcpy", "d2h", "copy D2H", 2, 7_000, 10_500, 7000, 0),
    ]
    assert tl.timeline.streams == {1: "compute"}
    assert tl.problems() == []
    s = tl.summary()
    assert s.span_ns == 10_500 and s.engines["d2h"].gb_per_s_busy == 2.0
