"""CPU tests of StreamPipeline(graph=True) against a fake driver that captures graphs.

The fake extends the one in test_pipeline_fakecuda.py: while a stream is being
captured, every operation enqueued on it (copies, host functions, event records,
stream-ordered alloc/free, and whatever the compute puts on the stream) becomes a
node of a linear graph instead of running. ``cuGraphLaunch`` enqueues the nodes on
the launch stream, behind the previous launch of the same exec, with the memcpy
parameters last set by ``cuGraphExecMemcpyNodeSetParams``. Graph memory is one
fixed buffer per alloc node, counted while allocated and poisoned when the free
node runs (so a free before the last use shows in the output). A synchronize on a
capturing stream invalidates the capture, as the driver does. It proves the logic
(same bytes as graph=False, cache, fallbacks, the failure path), not speed.
"""

from __future__ import annotations

import ctypes
import threading
import types

import numpy as np
import pytest

import fullpipe.cuda.driver as fdriver
import fullpipe.cuda.pool as fpool
import fullpipe.cuda.streams as fstreams
import fullpipe.pipeline.graphs as fgraphs
from fullpipe.cuda.hotpath import Memcpy3D
from fullpipe.errors import CudaError
from fullpipe.pipeline import StreamPipeline
from fullpipe.pipeline.graphs import GraphCaptureError
from fullpipe.pipeline.workload import reference
from tests import test_pipeline_fakecuda as base
from tests.test_pipeline_fakecuda import SUCCESS, FakeDriver, FakeMix, FakePool, FakeStream, row_sums

# These tests are of the staging ring: small pageable batches go through it, not in bulk.
pytestmark = pytest.mark.usefixtures("ring_staging")

fake = base.fake  # the fake driver's fixture; gfake below adds graphs to it

ERR_INVALID_VALUE = 1
ERR_CAPTURE_UNSUPPORTED = 900
ERR_CAPTURE_INVALIDATED = 901
ERR_CAPTURED_EVENT = 907
ERR_CAPTURE_UNJOINED = 904
MEM_HOST, MEM_DEVICE = 1, 2
KERNEL, MEMCPY, HOST, EVENT_RECORD, MEM_ALLOC, MEM_FREE = 0, 1, 3, 7, 10, 11
_HOSTFN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_FIELDS = [name for name, _ in Memcpy3D._fields_]


class CapStream(FakeStream):
    """A fake stream that records what is enqueued on it while it is captured."""

    def __init__(self, jitter):
        self.capture = None
        super().__init__(jitter)

    def put(self, op):
        if self.capture is not None:  # e.g. the compute's work: a kernel node
            self.capture.add(KERNEL, lambda params: op)
        else:
            super().put(op)


class FakeNode:
    def __init__(self, kind, make_op, params=None):
        self.kind = kind
        self.make_op = make_op  # make_op(params) at launch -> the op the stream runs
        self.params = params


class FakeGraph:
    def __init__(self, origin=None):
        self.origin = origin  # the stream the capture began on
        self.joined: set = set()  # streams forked into the capture (cuStreamWaitEvent on a captured event)
        self.rejoined: set = set()  # of those, the ones lane 0 waited for again
        self.nodes: list[FakeNode] = []
        self.keep: list = []  # graph memory (one buffer per alloc node)
        self.invalidated = False
        self.execs = 0
        self.destroyed = False

    def add(self, kind, make_op, params=None):
        node = FakeNode(kind, make_op, params)
        self.nodes.append(node)
        return node


class FakeExec:
    def __init__(self, graph):
        self.graph = graph
        self.params = {n: n.params for n in graph.nodes if n.kind == MEMCPY}
        self.done = threading.Event()
        self.done.set()
        self.destroyed = False


def _snapshot(params) -> types.SimpleNamespace:
    return types.SimpleNamespace(**{f: int(getattr(params, f) or 0) for f in _FIELDS})


def _copy_op(p):
    src = p.srcHost if p.srcMemoryType == MEM_HOST else p.srcDevice
    dst = p.dstHost if p.dstMemoryType == MEM_HOST else p.dstDevice
    n = p.WidthInBytes
    return lambda: ctypes.memmove(dst, src, n)


class GraphFakeDriver(FakeDriver):
    """FakeDriver plus stream capture, graphs, graph execs and graph memory."""

    CUstreamCaptureMode = types.SimpleNamespace(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL=1)
    CUgraphNodeType = types.SimpleNamespace(CU_GRAPH_NODE_TYPE_MEMCPY=MEMCPY)

    def __init__(self):
        super().__init__()
        self.lock = threading.Lock()
        self.graphs_live: set = set()
        self.execs_live: set = set()
        self.graph_mem_used = 0
        self.launches = 0
        self.captures = 0
        self.updates = 0
        self.trims = 0
        self.errors: list[str] = []  # broken graph rules seen on a stream thread

    def cuGetErrorName(self, err):
        names = {ERR_CAPTURE_UNSUPPORTED: b"CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
                 ERR_CAPTURE_INVALIDATED: b"CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
                 ERR_INVALID_VALUE: b"CUDA_ERROR_INVALID_VALUE"}
        return SUCCESS, names.get(int(err), b"CUDA_ERROR_FAKE")

    # ---- capture
    def cuStreamBeginCapture(self, stream, mode):
        if stream.capture is not None or mode != 1:
            return (ERR_INVALID_VALUE,)
        stream.capture = FakeGraph(origin=stream)
        return (SUCCESS,)

    def cuStreamEndCapture(self, stream):
        g = stream.capture
        if g is None or g.origin is not stream:
            return ERR_INVALID_VALUE, None
        # the capture ends for every stream that took part in it
        for s in (stream, *g.joined):
            s.capture = None
        if g.invalidated:
            return ERR_CAPTURE_INVALIDATED, None
        if g.joined - g.rejoined:  # a forked stream not joined back into the origin
            return ERR_CAPTURE_UNJOINED, None
        self.captures += 1
        self.graphs_live.add(g)
        return SUCCESS, g

    def cuStreamSynchronize(self, stream):
        if stream.capture is not None:  # not capturable: the driver invalidates the capture
            stream.capture.invalidated = True
            return (ERR_CAPTURE_UNSUPPORTED,)
        stream.sync()
        return (SUCCESS,)

    def cuEventSynchronize(self, ev):
        if getattr(ev, "captured", False):
            return (ERR_CAPTURED_EVENT,)
        return super().cuEventSynchronize(ev)

    def cuEventQuery(self, ev):
        if getattr(ev, "captured", False):
            return (ERR_CAPTURED_EVENT,)
        return super().cuEventQuery(ev)

    def cuCtxGetCurrent(self):
        return SUCCESS, "fake-context"

    # ---- operations: captured when the stream is capturing
    def cuMemAllocFromPoolAsync(self, n, pool, stream):
        if stream.capture is None:
            return ERR_INVALID_VALUE, 0  # the executor allocates through FakePool otherwise
        buf = ctypes.create_string_buffer(n + 256)
        addr = (ctypes.addressof(buf) + 255) // 256 * 256
        g = stream.capture
        g.keep.append(buf)

        def make_op(params):
            def alloc():
                with self.lock:
                    self.graph_mem_used += n
            return alloc

        g.add(MEM_ALLOC, make_op, types.SimpleNamespace(ptr=addr, n=n))
        return SUCCESS, addr

    def cuMemFreeAsync(self, ptr, stream):
        g = stream.capture
        if g is None:
            return (ERR_INVALID_VALUE,)
        allocs = [nd.params for nd in g.nodes if nd.kind == MEM_ALLOC and nd.params.ptr == ptr]
        if not allocs:
            return (ERR_INVALID_VALUE,)
        n = allocs[0].n

        def make_op(params):
            def free():
                ctypes.memset(ptr, 0xAB, n)  # a use after this point reads poison
                with self.lock:
                    self.graph_mem_used -= n
            return free

        g.add(MEM_FREE, make_op)
        return (SUCCESS,)

    def _memcpy(self, stream, params):
        if stream.capture is None:
            stream.put(_copy_op(params))
        else:
            stream.capture.add(MEMCPY, _copy_op, params)
        return (SUCCESS,)

    def cuMemcpyHtoDAsync(self, dst, src, n, stream):
        p = types.SimpleNamespace(**{f: 0 for f in _FIELDS})
        p.srcMemoryType, p.srcHost, p.dstMemoryType, p.dstDevice = MEM_HOST, int(src), MEM_DEVICE, int(dst)
        p.WidthInBytes, p.Height, p.Depth = n, 1, 1
        return self._memcpy(stream, p)

    def cuMemcpyDtoHAsync(self, dst, src, n, stream):
        p = types.SimpleNamespace(**{f: 0 for f in _FIELDS})
        p.srcMemoryType, p.srcDevice, p.dstMemoryType, p.dstHost = MEM_DEVICE, int(src), MEM_HOST, int(dst)
        p.WidthInBytes, p.Height, p.Depth = n, 1, 1
        return self._memcpy(stream, p)

    def cuLaunchHostFunc(self, stream, fn, user_data):
        if stream.capture is None:
            return super().cuLaunchHostFunc(stream, fn, user_data)
        f, data = _HOSTFN(int(fn)), int(user_data)
        stream.capture.add(HOST, lambda params: (lambda: f(data)))
        return (SUCCESS,)

    def cuEventRecord(self, ev, stream):
        if stream.capture is None:
            ev.captured = False
            return super().cuEventRecord(ev, stream)
        # On a capturing stream a plain record only marks a capture dependency: no node, and
        # the event refuses host waits from then on (the real driver: CUDA_ERROR_INVALID_VALUE).
        if stream.capture.invalidated:
            return (ERR_CAPTURE_INVALIDATED,)
        ev.captured = True
        ev.capture_of = (stream.capture, stream)
        return (SUCCESS,)

    def cuStreamWaitEvent(self, stream, ev, flags):
        """A wait on an event recorded in a capture forks the waiting stream into it (or
        joins a forked stream back, when the origin waits). Nodes keep enqueue order:
        the fake's graphs are linear, one valid order of the real graph."""
        g_src = getattr(ev, "capture_of", None) if getattr(ev, "captured", False) else None
        if g_src is None:
            if stream.capture is not None:
                return (ERR_INVALID_VALUE,)  # not modelled: a captured stream waiting on outside work
            return super().cuStreamWaitEvent(stream, ev, flags)
        g, src = g_src
        if stream.capture is None:
            stream.capture = g
            g.joined.add(stream)
        elif stream.capture is g and stream is g.origin:
            g.rejoined.add(src)
        return (SUCCESS,)

    def cuEventRecordWithFlags(self, ev, stream, flags):
        if stream.capture is None or not flags & 1:  # 1: CU_EVENT_RECORD_EXTERNAL
            return self.cuEventRecord(ev, stream)
        ev.captured = True  # until a launch records it: no host waits on it (CUDA_ERROR_CAPTURED_EVENT)

        def make_op(params):  # at launch, in launch order: one more record of the event
            ev.captured = False
            ev.recorded += 1
            gen = ev.recorded

            def done():
                with ev.cond:
                    ev.completed = max(ev.completed, gen)
                    ev.cond.notify_all()
            return done

        stream.capture.add(EVENT_RECORD, make_op)
        return (SUCCESS,)

    # ---- graphs
    def cuGraphGetNodes(self, g, num):
        return SUCCESS, (list(g.nodes[:num]) if num else []), len(g.nodes)

    def cuGraphNodeGetType(self, node):
        return SUCCESS, node.kind

    def cuGraphMemcpyNodeGetParams(self, node):
        return SUCCESS, _snapshot(node.params)

    def cuGraphInstantiate(self, g, flags):
        if g.destroyed or g.execs:  # a graph with memory nodes: one exec at a time
            return ERR_INVALID_VALUE, None
        g.execs += 1
        e = FakeExec(g)
        self.execs_live.add(e)
        return SUCCESS, e

    def cuGraphExecMemcpyNodeSetParams(self, e, node, params, ctx):
        old = e.params.get(node)
        new = _snapshot(params)  # the driver copies the parameters at the call
        if e.destroyed or old is None or ctx != "fake-context" or any(
                getattr(old, f) != getattr(new, f)
                for f in ("srcMemoryType", "dstMemoryType", "WidthInBytes", "Height", "Depth")):
            return (ERR_INVALID_VALUE,)
        e.params[node] = new
        self.updates += 1
        return (SUCCESS,)

    def cuGraphLaunch(self, e, stream):
        if e.destroyed or stream.capture is not None:
            return (ERR_INVALID_VALUE,)
        prev, done = e.done, threading.Event()
        e.done = done
        stream.put(prev.wait)  # ordered behind the previous launch of this exec
        for node in e.graph.nodes:
            stream.put(node.make_op(e.params.get(node, node.params)))
        stream.put(done.set)
        self.launches += 1
        return (SUCCESS,)

    def cuGraphExecDestroy(self, e):
        if e.destroyed:
            return (ERR_INVALID_VALUE,)
        e.destroyed = True
        e.graph.execs -= 1
        self.execs_live.discard(e)
        return (SUCCESS,)

    def cuGraphDestroy(self, g):
        if g.destroyed:
            return (ERR_INVALID_VALUE,)
        g.destroyed = True
        self.graphs_live.discard(g)
        return (SUCCESS,)

    def cuDeviceGet(self, index):
        return SUCCESS, index

    def cuDeviceGraphMemTrim(self, device):
        self.trims += 1
        return (SUCCESS,)


class GraphFakePool(FakePool):
    handle = "fake-pool-handle"


@pytest.fixture
def gfake(fake, monkeypatch):
    d = GraphFakeDriver()
    monkeypatch.setattr(fdriver, "driver", lambda: d)
    monkeypatch.setattr(fpool, "DevicePool", GraphFakePool)
    monkeypatch.setattr(fstreams, "return_streams", lambda dev, streams, **kw: None)
    monkeypatch.setattr(fstreams, "long_lived_streams",
                        lambda dev, n, **kw: [CapStream(fake.jitter["value"]) for _ in range(n)])
    return types.SimpleNamespace(driver=d, jitter=fake.jitter, pinned=fake.pinned)


def _assert_graph_clean(pipe, d):
    """Nothing left behind but what cached graphs hold: direct-staging graphs one pool
    buffer per stream (resources()["graph_lane_bytes"]), the cached whole-run graphs one
    per stream between them (["run_graph_bytes"])."""
    for s in pipe.streams:
        s.sync()
    r = pipe.resources()
    held = (pipe.n_streams if r.get("run_graph_execs", 0) else 0) + r.get("graph_lane_buffers", 0)
    assert r["pool_allocations"] == held
    assert r["pool_used_bytes"] == r.get("run_graph_bytes", 0) + r.get("graph_lane_bytes", 0)
    assert r["timing_events_out"] == 0 and not r["running"]
    assert r["python_host_functions_pending"] == 0
    assert r["pinned_slots_free"] == 2 * pipe.slots
    assert d.graph_mem_used == 0


def _assert_closed(d):
    assert not d.execs_live and not d.graphs_live and d.trims >= 1


def _random_batches(seed, n, sizes):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 2**32, int(rng.choice(sizes)), dtype=np.uint32) for _ in range(n)]


# ----------------------------------------------------------------------------- validation
def test_graph_options_are_checked_before_any_gpu_work():
    with pytest.raises(ValueError, match="copy_streams=True are not combined"):
        StreamPipeline(FakeMix(), graph=True, copy_streams=True)
    with pytest.raises(ValueError, match="staging='direct'"):
        StreamPipeline(FakeMix(), graph=True, staging="direct")
    with pytest.raises(TypeError, match="graph must be True, False or 'batch'"):
        StreamPipeline(FakeMix(), graph="yes")
    StreamPipeline(FakeMix(), graph=True, synchronous=True)  # fine


# ----------------------------------------------------------------------------- same bytes
@pytest.mark.parametrize("recycle", ["hostfn", "pyhostfn", "event"])
@pytest.mark.parametrize("slots", [1, 4])
def test_ring_graphs_give_the_same_bytes(gfake, recycle, slots):
    d = gfake.driver
    batches = _random_batches(slots, 300, [1000, 2048, 3001])
    want = [reference(b, 2) for b in batches]
    pipe = StreamPipeline(FakeMix(), streams=3, slots=slots, recycle=recycle, copy_threads=2, graph=True)
    outs = pipe.run_batches(batches)
    for w, o in zip(want, outs):
        np.testing.assert_array_equal(o, w)
    st = pipe.stats
    assert st.staging == {"input": "ring", "output": "ring"}
    # one graph per (slot, shape): captured once, every batch launched
    assert st.graph["captures"] == st.graph["graphs"] == 3 * slots
    assert st.graph["launches"] == 300 and st.graph["fallback_batches"] == 0
    assert d.launches == 300 and d.updates == 0  # ring: nothing to update per batch
    assert not st.timings and not st.busy_ms  # no per-batch timing in graph mode
    assert "graph mode" in st.graph["reason"] and "graph:" in str(st)
    _assert_graph_clean(pipe, d)
    # a second run reuses every graph and the ring signals
    outs2 = pipe.run_batches(batches[::-1])
    for w, o in zip(want[::-1], outs2):
        np.testing.assert_array_equal(o, w)
    assert pipe.stats.graph["captures"] == 0 and pipe.stats.graph["launches"] == 300
    _assert_graph_clean(pipe, d)
    assert pipe.resources()["graph_execs"] == 3 * slots
    pipe.close()
    _assert_closed(d)


def test_direct_graphs_update_the_host_addresses(gfake):
    d = gfake.driver
    rng = np.random.default_rng(1)
    x = rng.integers(0, 2**32, 100_003, dtype=np.uint32)
    out = np.full_like(x, 0xDEADBEEF)
    gfake.pinned.update({x.ctypes.data, out.ctypes.data})
    with StreamPipeline(FakeMix(3), streams=4, chunk=4096, graph=True) as pipe:
        assert pipe.run(x, out=out) is out
        np.testing.assert_array_equal(out, reference(x, 3))
        st = pipe.stats
        n = -(-100_003 // 4096)
        assert st.staging == {"input": "direct", "output": "direct"} and st.batches == n
        # one graph per (stream, shape): 4 streams x the full chunk, 1 x the short last chunk
        assert st.graph["captures"] == 5 and st.graph["launches"] == n
        assert d.updates == 2 * n  # H2D source and D2H destination, per batch
        _assert_graph_clean(pipe, d)
        out[:] = 0
        pipe.run(x, out=out)
        np.testing.assert_array_equal(out, reference(x, 3))
        assert pipe.stats.graph["captures"] == 0
    _assert_closed(d)


def test_direct_batches_of_several_shapes_and_mixed_staging(gfake):
    d = gfake.driver
    batches = _random_batches(2, 120, [512, 777, 4096])
    outs = [np.zeros_like(b) for b in batches]
    gfake.pinned.update(b.ctypes.data for b in batches)
    gfake.pinned.update(o.ctypes.data for o in outs)
    with StreamPipeline(FakeMix(1), streams=3, graph=True) as pipe:
        pipe.run_batches(batches, outs=outs)
        for b, o in zip(batches, outs):
            np.testing.assert_array_equal(o, reference(b, 1))
        assert pipe.stats.graph["captures"] == 9 and pipe.stats.graph["launches"] == 120
        _assert_graph_clean(pipe, d)
    # pageable input through the ring, pinned output direct: graph per (slot, shape)
    x = np.arange(50_000, dtype=np.uint32)
    out = np.zeros_like(x)
    gfake.pinned.add(out.ctypes.data)
    with StreamPipeline(FakeMix(1), streams=2, chunk="64KiB", slots=2, graph=True) as pipe:
        pipe.run(x, out=out)
        np.testing.assert_array_equal(out, reference(x, 1))
        assert pipe.stats.staging == {"input": "ring", "output": "direct"}
        assert pipe.stats.graph["launches"] == pipe.stats.batches
        _assert_graph_clean(pipe, d)
    _assert_closed(d)


def test_identity_sink_and_other_output_shapes(gfake):
    x = np.random.default_rng(2).integers(0, 255, (1000, 7), dtype=np.uint8)
    with StreamPipeline(None, streams=3, chunk=37, graph=True) as pipe:
        np.testing.assert_array_equal(pipe.run(x), x)
        assert pipe.stats.graph["launches"] == pipe.stats.batches
    with StreamPipeline(None, streams=2, chunk=100, output=None, graph=True) as sink:
        assert sink.run(x) is None and sink.stats.graph["launches"] == 10

    xf = np.random.default_rng(3).random((999, 16), dtype=np.float32)
    with StreamPipeline(row_sums, streams=3, chunk=100, output=((), np.float64), graph=True) as pipe:
        y = pipe.run(xf)
        np.testing.assert_allclose(y, xf.sum(axis=1, dtype=np.float64))
    _assert_closed(gfake.driver)


def test_synchronous_graph_run_is_correct(gfake):
    x = np.arange(5000, dtype=np.uint32)
    with StreamPipeline(FakeMix(), streams=1, chunk=512, synchronous=True, graph=True) as pipe:
        np.testing.assert_array_equal(pipe.run(x), reference(x, 2))
        assert pipe.stats.graph["launches"] == 10


def test_compute_is_called_only_at_capture_and_a_new_compute_recaptures(gfake):
    mix = FakeMix()
    rng = np.random.default_rng(5)
    # slot j % 2, shape (j // 2) % 2: any 4 consecutive batches cover the 4 (slot, shape) pairs
    batches = [rng.integers(0, 2**32, (100, 200)[(j // 2) % 2], dtype=np.uint32) for j in range(60)]
    with StreamPipeline(mix, streams=2, slots=2, graph=True) as pipe:
        pipe.run_batches(batches)
        assert mix.calls == 4  # 2 slots x 2 shapes
        pipe.run_batches(batches)
        assert mix.calls == 4
        pipe.compute = other = FakeMix(rounds=1)
        outs = pipe.run_batches(batches)
        assert other.calls == 4 and pipe.stats.graph["captures"] == 4
        np.testing.assert_array_equal(outs[7], reference(batches[7], 1))
        pipe.reset_graphs()
        assert pipe.resources()["graph_execs"] == 0
        pipe.run_batches(batches[:4])
        assert other.calls == 8
        assert len(gfake.driver.execs_live) == 4
    _assert_closed(gfake.driver)


def test_chunk_auto_probes_without_graphs_then_launches_graphs(gfake):
    gfake.jitter["value"] = 0.0
    x = np.random.default_rng(5).integers(0, 2**32, 48 << 20 >> 2, dtype=np.uint32)
    with StreamPipeline(FakeMix(0), streams=2, chunk="auto", graph=True) as pipe:
        y = pipe.run(x)
        np.testing.assert_array_equal(y, x)
        assert len(pipe.probe_stats.timings) == 3  # the probes ran without graphs, timed
        assert pipe.stats.graph["launches"] == pipe.stats.batches


# ----------------------------------------------------------------------------- the cache cap
@pytest.mark.parametrize("pinned", [False, True])
def test_past_the_cache_cap_new_shapes_run_without_a_graph(gfake, monkeypatch, pinned):
    d = gfake.driver
    sizes = [100 + 8 * k for k in range(12)]
    batches = [np.random.default_rng(k).integers(0, 2**32, s, dtype=np.uint32) for k, s in enumerate(sizes * 3)]
    outs = [np.zeros_like(b) for b in batches]
    if pinned:
        gfake.pinned.update(b.ctypes.data for b in batches)
        gfake.pinned.update(o.ctypes.data for o in outs)
    monkeypatch.setattr(fgraphs, "MAX_GRAPHS", 10)
    with StreamPipeline(FakeMix(), streams=2, slots=2, graph=True) as pipe:
        pipe.run_batches(batches, outs=outs)
        for b, o in zip(batches, outs):
            np.testing.assert_array_equal(o, reference(b, 2))
        g = pipe.stats.graph
        assert g["graphs"] == 10 and g["captures"] == 10
        assert g["launches"] + g["fallback_batches"] == len(batches) and g["fallback_batches"] > 0
        assert "at most 10 graphs" in g["reason"]
        assert len(d.execs_live) == 10
        _assert_graph_clean(pipe, d)
    _assert_closed(d)


# ----------------------------------------------------------------------------- failures
class SyncingMix(FakeMix):
    """Synchronizes its stream: not capturable."""

    def __call__(self, stream, x, y):
        super().__call__(stream, x, y)
        fdriver.call("cuStreamSynchronize", stream)


@pytest.mark.parametrize("pinned", [False, True])
@pytest.mark.parametrize("recycle", ["hostfn", "event"])
def test_a_compute_that_synchronizes_fails_capture_cleanly(gfake, pinned, recycle):
    d = gfake.driver
    batches = _random_batches(6, 30, [1000])
    outs = [np.zeros_like(b) for b in batches]
    if pinned:
        gfake.pinned.update(b.ctypes.data for b in batches)
        gfake.pinned.update(o.ctypes.data for o in outs)
    pipe = StreamPipeline(SyncingMix(), streams=3, slots=3, recycle=recycle, graph=True)
    with pytest.raises(GraphCaptureError, match="capturable") as info:
        pipe.run_batches(batches, outs=outs)
    assert isinstance(info.value, ValueError) and isinstance(info.value.__cause__, CudaError)
    assert info.value.batch_index == 0
    assert any("failed at batch 0" in n for n in info.value.__notes__)
    _assert_graph_clean(pipe, d)
    assert not d.graphs_live and not d.execs_live  # the failed capture left nothing
    assert all(s.capture is None for s in pipe.streams)
    # usable again with a capturable compute
    pipe.compute = FakeMix()
    pipe.run_batches(batches, outs=outs)
    np.testing.assert_array_equal(outs[29], reference(batches[29], 2))
    _assert_graph_clean(pipe, d)
    pipe.close()
    _assert_closed(d)


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_an_exception_in_compute_during_a_later_capture_drains_and_returns_everything(gfake, exc):
    """Batches 0-2 are launched as graphs; batch 3 (a new shape on slot 0) raises while
    it is being captured: in-flight graphs drain, the ring comes back, nothing leaks."""
    d = gfake.driver
    sizes = [1000, 1000, 1000, 2000] + [1000] * 20
    batches = [np.random.default_rng(k).integers(0, 2**32, s, dtype=np.uint32) for k, s in enumerate(sizes)]
    pipe = StreamPipeline(FakeMix(fail_at=3, exc=exc), streams=3, slots=3, graph=True)
    with pytest.raises(exc, match="on purpose") as info:
        pipe.run_batches(batches)
    assert info.value.batch_index == 3
    _assert_graph_clean(pipe, d)
    assert all(s.capture is None for s in pipe.streams)
    assert pipe.resources()["graph_execs"] == 0  # ring graphs go with the ring signals they post
    pipe.compute = FakeMix()
    outs = pipe.run_batches(batches)
    for b, o in zip(batches, outs):
        np.testing.assert_array_equal(o, reference(b, 2))
    _assert_graph_clean(pipe, d)
    pipe.close()
    _assert_closed(d)


def test_a_free_too_early_in_the_graph_would_show(gfake, monkeypatch):
    """Sanity check of the fake: a graph whose free node runs before its D2H reads poison."""
    d = gfake.driver
    real_free, real_d2h = d.cuMemFreeAsync, d.cuMemcpyDtoHAsync
    pending = {}

    def free_first(dst, src, n, stream):  # swap the D2H and the free in capture order
        if stream.capture is not None:
            pending[stream] = (dst, src, n)
            return (SUCCESS,)
        return real_d2h(dst, src, n, stream)

    def free_then_copy(ptr, stream):
        r = real_free(ptr, stream)
        if stream in pending:
            real_d2h(*pending.pop(stream), stream)
        return r

    monkeypatch.setattr(d, "cuMemcpyDtoHAsync", free_first)
    monkeypatch.setattr(d, "cuMemFreeAsync", free_then_copy)
    x = np.arange(4096, dtype=np.uint32)
    with StreamPipeline(FakeMix(), streams=2, chunk=1024, graph=True) as pipe:
        y = pipe.run(x)
    assert not np.array_equal(y, reference(x, 2))


def test_direct_staging_without_an_updatable_memcpy_node_runs_without_graphs(gfake, monkeypatch):
    """If the driver captured the host copy as something other than a plain memcpy node,
    direct-staging batches fall back to the normal path, and the stats say why."""
    d = gfake.driver
    monkeypatch.setattr(d, "cuGraphNodeGetType", lambda node: (SUCCESS, 14))  # e.g. a batched memcpy
    x = np.random.default_rng(7).integers(0, 2**32, 10_000, dtype=np.uint32)
    out = np.zeros_like(x)
    gfake.pinned.update({x.ctypes.data, out.ctypes.data})
    with StreamPipeline(FakeMix(), streams=2, chunk=1000, graph=True) as pipe:
        pipe.run(x, out=out)
        np.testing.assert_array_equal(out, reference(x, 2))
        g = pipe.stats.graph
        assert g["launches"] == 0 and g["fallback_batches"] == 10 and g["graphs"] == 0
        assert "no plain memcpy node" in g["reason"]
        assert not d.graphs_live and not d.execs_live
        _assert_graph_clean(pipe, d)


# ----------------------------------------------------------------------------- whole-run graphs
def _pinned_run(gfake, n=100_003, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 2**32, n, dtype=np.uint32)
    out = np.full_like(x, 0xDEADBEEF)
    gfake.pinned.update({x.ctypes.data, out.ctypes.data})
    return x, out


def test_a_repeated_pinned_run_is_captured_whole_then_replayed(gfake):
    """Run 1 goes batch by batch and remembers the run; run 2 captures every lane's
    batches as one graph and launches it; run 3 is one launch that computes the new
    contents of the same arrays, without calling the compute."""
    d = gfake.driver
    x, out = _pinned_run(gfake)
    mix = FakeMix(3)
    n = -(-x.size // 4096)
    with StreamPipeline(mix, streams=4, chunk=4096, graph=True) as pipe:
        pipe.run(x, out=out)
        g1 = pipe.stats.graph
        assert g1["run_graph"] == "seen" and g1["launches"] == n and "captured whole" in g1["reason"]
        launches, updates, calls = d.launches, d.updates, mix.calls
        out.fill(0)
        pipe.run(x, out=out)
        np.testing.assert_array_equal(out, reference(x, 3))
        g2 = pipe.stats.graph
        assert g2["run_graph"] == "captured" and g2["run_graphs"] == 1 and g2["launches"] == 0
        assert "whole run launched as one CUDA graph" in g2["reason"] and g2["run_capture_ms"] > 0
        assert d.launches == launches + 1 and d.updates == updates  # one launch, no per-batch updates
        assert mix.calls == calls + n  # the capture called the compute once per batch
        # its device memory: one buffer per stream for the largest batch (4096 words in, 4096 out)
        assert pipe.resources()["run_graph_bytes"] == 4 * 2 * 4096 * 4
        _assert_graph_clean(pipe, d)
        # new data in the same arrays: replayed, and the output is of the new data
        x[:] = np.random.default_rng(9).integers(0, 2**32, x.size, dtype=np.uint32)
        out.fill(0)
        pipe.run(x, out=out)
        np.testing.assert_array_equal(out, reference(x, 3))
        g3 = pipe.stats.graph
        assert g3["run_graph"] == "replayed" and g3["run_capture_ms"] == 0
        assert d.launches == launches + 2 and mix.calls == calls + n
        assert len(pipe.stats.enqueue_us) == n
        assert pipe.resources()["run_graph_execs"] == 1
        _assert_graph_clean(pipe, d)
    _assert_closed(d)


def test_other_addresses_shapes_or_compute_are_not_replayed(gfake):
    d = gfake.driver
    x, out = _pinned_run(gfake, n=20_000)
    mix = FakeMix(2)
    with StreamPipeline(mix, streams=3, chunk=1000, graph=True) as pipe:
        for _ in range(3):
            pipe.run(x, out=out)
        assert pipe.stats.graph["run_graph"] == "replayed"
        # another output array: a different run
        out2 = np.zeros_like(out)
        gfake.pinned.add(out2.ctypes.data)
        pipe.run(x, out=out2)
        assert pipe.stats.graph["run_graph"] == "seen"
        np.testing.assert_array_equal(out2, reference(x, 2))
        # the same arrays cut into other batches: a different run
        pipe.run(x[:15_000], out=out[:15_000])
        assert pipe.stats.graph["run_graph"] == "seen"
        # back to the first: still cached
        pipe.run(x, out=out)
        assert pipe.stats.graph["run_graph"] == "replayed"
        # a new compute object drops the cached runs; so does reset_graphs()
        pipe.compute = FakeMix(1)
        pipe.run(x, out=out)
        assert pipe.stats.graph["run_graph"] == "seen" and pipe.resources()["run_graph_execs"] == 0
        np.testing.assert_array_equal(out, reference(x, 1))
        pipe.run(x, out=out)
        assert pipe.stats.graph["run_graph"] == "captured"
        np.testing.assert_array_equal(out, reference(x, 1))
        pipe.reset_graphs()
        for s in pipe.streams:  # the buffers are freed in stream order (the run's lanes on lane 0,
            s.sync()            # the per-batch graphs' on each stream), behind every launch
        r = pipe.resources()
        assert r["run_graph_execs"] == 0 and r["run_graph_bytes"] == 0 and r["pool_used_bytes"] == 0
        pipe.run(x, out=out)
        assert pipe.stats.graph["run_graph"] == "seen"
        _assert_graph_clean(pipe, d)
    _assert_closed(d)


def test_ring_staging_synchronous_and_graph_batch_runs_stay_batch_by_batch(gfake):
    x = np.random.default_rng(3).integers(0, 2**32, 20_000, dtype=np.uint32)  # pageable
    with StreamPipeline(FakeMix(), streams=3, chunk=1000, graph=True) as pipe:
        for _ in range(3):
            np.testing.assert_array_equal(pipe.run(x), reference(x, 2))
            assert pipe.stats.graph["run_graph"] == "none" and pipe.stats.graph["launches"] == 20
    xp, outp = _pinned_run(gfake, n=20_000)
    with StreamPipeline(FakeMix(), streams=2, chunk=1000, graph=True, synchronous=True) as pipe:
        for _ in range(3):
            pipe.run(xp, out=outp)
            assert pipe.stats.graph["run_graph"] == "none"
        np.testing.assert_array_equal(outp, reference(xp, 2))
    with StreamPipeline(FakeMix(), streams=2, chunk=1000, graph="batch") as pipe:
        for _ in range(3):
            outp.fill(0)
            pipe.run(xp, out=outp)
            g = pipe.stats.graph
            assert g["run_graph"] == "none" and g["launches"] == 20 and "graph='batch'" in g["reason"]
        np.testing.assert_array_equal(outp, reference(xp, 2))
    _assert_closed(gfake.driver)


def test_at_most_max_run_graphs_are_kept(gfake, monkeypatch):
    import fullpipe.pipeline.run_graphs as frun

    d = gfake.driver
    monkeypatch.setattr(frun, "MAX_RUN_GRAPHS", 2)
    runs = [_pinned_run(gfake, n=5000 + 1000 * k, seed=k) for k in range(3)]
    with StreamPipeline(FakeMix(), streams=2, chunk=1000, graph=True) as pipe:
        for x, out in runs:
            pipe.run(x, out=out)
            pipe.run(x, out=out)
            assert pipe.stats.graph["run_graph"] == "captured"
        r = pipe.resources()  # two graphs, one set of lane buffers: a batch's input (4000 bytes,
        assert r["run_graph_execs"] == 2  # 256-byte aligned) and output per stream
        assert r["run_graph_bytes"] == pipe.n_streams * (4096 + 4000)
        x0, out0 = runs[0]  # the least recently used went: seen again from scratch
        pipe.run(x0, out=out0)
        assert pipe.stats.graph["run_graph"] == "seen"
        x2, out2 = runs[2]
        out2.fill(0)
        pipe.run(x2, out=out2)
        assert pipe.stats.graph["run_graph"] == "replayed"
        np.testing.assert_array_equal(out2, reference(x2, 2))
        _assert_graph_clean(pipe, d)
    _assert_closed(d)


def test_larger_batches_take_larger_shared_lane_buffers_and_drop_the_graphs_on_the_old(gfake):
    d = gfake.driver
    x, out = _pinned_run(gfake, n=8000)
    with StreamPipeline(FakeMix(), streams=2, chunk=1000, graph=True) as pipe:
        for _ in range(2):
            pipe.run(x, out=out)
        assert pipe.stats.graph["run_graph"] == "captured"
        small = pipe.resources()["run_graph_bytes"]
        pipe.chunk = 2000  # the same arrays in larger batches: another run, which outgrows the lanes
        for _ in range(2):
            out.fill(0)
            pipe.run(x, out=out)
            np.testing.assert_array_equal(out, reference(x, 2))
        r = pipe.resources()
        assert pipe.stats.graph["run_graph"] == "captured" and r["run_graph_execs"] == 1  # the first was dropped
        assert r["run_graph_bytes"] == pipe.n_streams * (8192 + 8000) > small
        pipe.chunk = 1000  # smaller batches fit the larger lanes: captured beside, no new buffers
        for _ in range(2):
            out.fill(0)
            pipe.run(x, out=out)
            np.testing.assert_array_equal(out, reference(x, 2))
        r = pipe.resources()
        assert r["run_graph_execs"] == 2 and r["run_graph_bytes"] == pipe.n_streams * (8192 + 8000)
        out.fill(0)
        pipe.chunk = 2000
        pipe.run(x, out=out)
        assert pipe.stats.graph["run_graph"] == "replayed"
        np.testing.assert_array_equal(out, reference(x, 2))
        _assert_graph_clean(pipe, d)
    _assert_closed(d)


class LateSyncingMix(FakeMix):
    """Capturable for its first ``ok`` calls, then synchronizes its stream (not capturable)."""

    def __init__(self, ok):
        super().__init__()
        self.ok = ok

    def __call__(self, stream, x, y):
        super().__call__(stream, x, y)
        if self.calls > self.ok:
            fdriver.call("cuStreamSynchronize", stream)


@pytest.mark.parametrize("failure", ["uncapturable", "raises"])
def test_a_failed_whole_run_capture_leaves_nothing_and_the_pipeline_usable(gfake, failure):
    """Run 1 captures one graph per stream (3 calls); the second run's whole-run capture
    fails at batch 7 (on lane 1): every lane leaves capture mode, no graph is kept, the
    error names the batch, and the next run works."""
    d = gfake.driver
    x, out = _pinned_run(gfake, n=30_000)
    mix = LateSyncingMix(ok=3 + 7) if failure == "uncapturable" else FakeMix(fail_at=3 + 7)
    pipe = StreamPipeline(mix, streams=3, chunk=1000, graph=True)
    pipe.run(x, out=out)
    assert pipe.stats.graph["run_graph"] == "seen" and mix.calls == 3
    graphs_before = set(d.graphs_live)
    expected = GraphCaptureError if failure == "uncapturable" else RuntimeError
    with pytest.raises(expected) as info:
        pipe.run(x, out=out)
    if failure == "uncapturable":
        assert "the whole run" in str(info.value) and isinstance(info.value.__cause__, CudaError)
    assert info.value.batch_index == 7
    assert all(s.capture is None for s in pipe.streams)
    assert d.graphs_live == graphs_before and pipe.resources()["run_graph_execs"] == 0
    _assert_graph_clean(pipe, d)
    pipe.compute = FakeMix()
    for _ in range(3):
        out.fill(0)
        pipe.run(x, out=out)
        np.testing.assert_array_equal(out, reference(x, 2))
    assert pipe.stats.graph["run_graph"] == "replayed"
    pipe.close()
    _assert_closed(d)


def test_direct_graphs_share_one_buffer_per_stream_which_grows_with_the_batches(gfake):
    """Direct staging: a graph per stream and shape, all of a stream's graphs on one pool
    buffer (no mem-alloc nodes); a run with larger batches grows the buffers and
    recaptures that stream's graphs; reset_graphs() frees them."""
    d = gfake.driver
    small = _random_batches(11, 40, [1000, 2000])
    large = _random_batches(12, 40, [1000, 4000])
    for bs in (small, large):
        gfake.pinned.update(b.ctypes.data for b in bs)
    outs = {id(bs): [np.zeros_like(b) for b in bs] for bs in (small, large)}
    for o in outs.values():
        gfake.pinned.update(x.ctypes.data for x in o)
    with StreamPipeline(FakeMix(), streams=2, graph="batch") as pipe:
        pipe.run_batches(small, outs=outs[id(small)])
        def device_bytes(words):  # input, 256-byte aligned, then output
            return -(-words * 4 // 256) * 256 + words * 4

        r = pipe.resources()
        assert r["graph_lane_buffers"] == 2 and r["graph_lane_bytes"] == 2 * device_bytes(2000)
        graph = next(iter(d.graphs_live))
        assert not any(n.kind in (MEM_ALLOC, MEM_FREE) for n in graph.nodes)
        pipe.run_batches(large, outs=outs[id(large)])
        assert pipe.stats.graph["captures"] == 4  # every graph recaptured on the grown buffers
        assert pipe.resources()["graph_lane_bytes"] == 2 * device_bytes(4000)
        pipe.run_batches(small, outs=outs[id(small)])  # fits the grown buffers
        assert pipe.stats.graph["captures"] == 2  # only the 2000-word shape is new (x 2 streams)
        for bs in (small, large):
            for b, o in zip(bs, outs[id(bs)]):
                np.testing.assert_array_equal(o, reference(b, 2))
        _assert_graph_clean(pipe, d)
        pipe.reset_graphs()
        pipe.streams[0].sync(); pipe.streams[1].sync()
        assert pipe.resources()["graph_lane_bytes"] == 0 and pipe.resources()["pool_used_bytes"] == 0
    _assert_closed(d)
