"""Per-batch CUDA graphs: ``StreamPipeline(graph=True)``.

Without a graph, a batch costs the host about six driver calls (allocate, H2D,
slot signal, compute launch, D2H, output signal, free: ~18 us on an H200 host).
With ``graph=True`` that sequence is captured once into a CUDA graph
(``cuStreamBeginCapture`` in thread-local mode ... ``cuStreamEndCapture``,
``cuGraphInstantiate``) and each later batch of the same shapes is one
``cuGraphLaunch``. The capture runs the executor's own per-batch protocol
(protocol.py) on the captured stream, so what one graph holds, in stream order, is::

    mem-alloc node      (the captured cuMemAllocFromPoolAsync: graph memory, see below)
    memcpy node         H2D from the ring slot or the user's pinned array
    host / event node   the input slot's "free" signal (ring staging only)
    compute's nodes     the user callable, called ONCE, while the stream is captured
    memcpy node         D2H to the ring slot or the user's pinned array
    host / event node   the output slot's "ready" signal (ring staging only)
    mem-free node

Every parameter of a graph is fixed, so graphs are cached per *lane* and shapes:

- ring staging (pageable arrays): the host side is ring slot ``j % K``, whose
  address never changes: one graph per (slot, shapes). Batch j launches slot
  ``j % K``'s graph on stream ``j % N``. Launches of one graph exec are ordered
  behind its previous launch; the ring already keeps slot k's batches in order,
  so that costs no overlap.
- direct staging (pinned arrays): the host address changes per batch. One graph
  per (stream, shapes), launched on that stream; before each launch its H2D and
  D2H memcpy nodes get the batch's host addresses
  (``cuGraphExecMemcpyNodeSetParams``; launches already enqueued keep theirs).

Driver calls per batch once its graph exists: ring staging 1 (``cuGraphLaunch``;
with ``recycle="event"`` plus two Python semaphore releases, no driver call);
direct staging 3 (two memcpy-node updates + ``cuGraphLaunch``); mixed staging 2.
The non-graph path makes 5 to 7 (see executor.py).

The cache holds at most ``max_graphs`` (64) graph execs. A batch whose graph is
not cached and cannot be captured because the cache is full runs on the normal,
non-graph path (counted in ``stats.graph["fallback_batches"]``).

Device memory. Direct staging (graphs per stream): one buffer per stream from the
pipeline's pool, sized for the largest batch so far, which every graph of that stream
uses (all their launches are in that stream's order, so they may share it); it is
held while graphs are cached (``resources()["graph_lane_bytes"]``), grown (the direct graphs
recaptured) when a run has larger batches, and freed by :meth:`clear`
and :meth:`close`. Not mem-alloc/mem-free nodes there: with them, one graph per batch
of 16 KiB on 3 streams cost 54 us of host time per launch and as much GPU time per
batch on an H100, 11 us with a buffer per stream (session 11). Ring staging (graphs per
slot, launched on varying streams, so graphs of one slot may run at once): a captured
stream-ordered allocation becomes a graph mem-alloc node; its memory belongs to the
device's graph memory (``cuDeviceGetGraphMemAttribute``), not to the pipeline's
DevicePool. :meth:`BatchGraphs.close` destroys every exec and graph and returns the
unused graph memory to the driver (``cuDeviceGraphMemTrim``).

The compute callable runs only when a graph is captured, never at replay: what it
reads when called (e.g. ``MixKernel.rounds``) is frozen into the graph. Assigning
a different compute object to the pipeline drops the cached graphs;
:meth:`BatchGraphs.clear` (``StreamPipeline.reset_graphs()``) drops them by hand.
It must enqueue only capturable work on the stream it is given: no stream or
device synchronization, no host waits on the GPU, no allocations outside stream
order. A capture that fails is ended, its graph destroyed, and
:class:`GraphCaptureError` (a ValueError) says so.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from ..cuda import driver as drv
from ..cuda.hotpath import HotPath, Memcpy3D, handle_int
from ..errors import CudaError
from .lanes import LaneBuffers
from .protocol import Route, batch_protocol
from .staging import GpuSignal, make_signal

MAX_GRAPHS = 64
_ORPHANED: list[Any] = []  # signals (and their callbacks) whose host nodes may still run some day

# cuda.h: CU_MEMORYTYPE_HOST = 1, CU_MEMORYTYPE_DEVICE = 2, CU_MEMORYTYPE_UNIFIED = 4
_MEM_HOST, _MEM_DEVICE, _MEM_UNIFIED = 1, 2, 4


class GraphCaptureError(ValueError):
    """The per-batch work could not be captured into a CUDA graph (graph=True)."""


@dataclasses.dataclass
class _CopyUpdate:
    """A memcpy node whose host address changes per launch (direct staging)."""

    node: Any  # the node of the template graph (int with libcuda, else the driver's object)
    params: Memcpy3D  # the captured parameters; ``field`` is rewritten per launch
    field: str  # "srcHost"/"srcDevice" (H2D source) or "dstHost"/"dstDevice" (D2H destination)


@dataclasses.dataclass
class _Graph:
    graph: Any  # CUgraph: kept alive, the memcpy node handles belong to it
    exec: Any  # CUgraphExec (driver object)
    exec_h: Any  # what HotPath takes
    ring: bool  # holds ring slot addresses and signals
    h2d: _CopyUpdate | None
    d2h: _CopyUpdate | None
    signals: tuple  # the ring signals whose nodes the graph holds (told of each launch)


@dataclasses.dataclass(frozen=True)
class GraphRun:
    """What one run's graphs depend on (besides a batch's lane and shapes)."""

    compute: Any
    ring_in: bool  # the input comes from a ring slot (else from the user's pinned array)
    ring_out: bool
    has_out: bool
    in_dtype: Any
    out_dtype: Any
    by_slot: bool  # graphs are cached per ring slot (a ring side), else per stream
    direct: bool  # a side's host address is updated per launch
    key: tuple  # the part of the cache key that the run sets

    @classmethod
    def of(cls, compute: Any, stage_in: str, stage_out: str | None, in_dtype: Any, out_dtype: Any) -> "GraphRun":
        return cls(compute=compute, ring_in=stage_in == "ring", ring_out=stage_out == "ring",
                   has_out=stage_out is not None, in_dtype=in_dtype, out_dtype=out_dtype,
                   by_slot="ring" in (stage_in, stage_out), direct="direct" in (stage_in, stage_out),
                   key=(stage_in, stage_out, str(in_dtype), str(out_dtype)))


def end_capture(sh: Any) -> tuple[Any, BaseException | None]:
    """cuStreamEndCapture on stream ``sh``; never raises (an invalidated capture returns its
    error)."""
    try:
        return drv.call("cuStreamEndCapture", sh), None
    except CudaError as exc:
        return None, exc


class BatchGraphs:
    """The graphs of one StreamPipeline, with their cache and the ring signals they post.

    The executor calls :meth:`begin_run` once per run, :meth:`ring_signals` for the
    ring's slot signals, then per batch :meth:`graph_for` (cached, or captured now,
    or None: use the normal path) and :meth:`launch`; :meth:`after_abort` when a run
    failed, :meth:`run_stats` at the end, :meth:`close` with the pipeline.
    """

    def __init__(self, *, pool: Any, device: Any, hot: HotPath, recycle: str, slots: int,
                 max_graphs: int | None = None):
        self.pool, self.device, self.hot, self.recycle, self.slots = pool, device, hot, recycle, slots
        self.max_graphs = MAX_GRAPHS if max_graphs is None else max_graphs
        self._cache: dict[tuple, _Graph] = {}
        self._compute: Any = None
        self._ring_id: tuple | None = None
        self._signals: dict[str, list[GpuSignal]] = {}
        self._ctx_h: Any = None
        self._direct_unsupported: str | None = None
        self._run: GraphRun | None = None
        self._routes: list[Route] = []
        self._lanes: LaneBuffers | None = None  # direct staging: a buffer per stream, made at the first run
        self.launches = self.captures = self.fallbacks = 0
        self.capture_s = 0.0

    def __len__(self) -> int:
        return len(self._cache)

    @property
    def lane_bytes(self) -> int:
        """Pool memory held by the per-stream buffers of direct-staging graphs."""
        return 0 if self._lanes is None else self._lanes.held_bytes

    @property
    def lane_buffers(self) -> int:
        return 0 if self._lanes is None else len(self._lanes)

    # ------------------------------------------------------------------ per run
    def begin_run(self, run: GraphRun, routes: list[Route], ring_in: Any, ring_out: Any,
                  device_bytes: int = 0) -> None:
        """Set what this run's graphs depend on (``routes``: each lane's streams, as the
        executor's protocol uses them; ``device_bytes``: the device memory of the run's
        largest batch); drop graphs that can never be launched again (another compute
        object, a reallocated ring, a stream buffer that had to grow)."""
        if run.compute is not self._compute:
            self.clear()
            self._compute = run.compute
        ring_id = (ring_in.slot_bytes, tuple(ring_in.address(k) for k in range(ring_in.slots))
                   if ring_in.slot_bytes else (),
                   ring_out.slot_bytes, tuple(ring_out.address(k) for k in range(ring_out.slots))
                   if ring_out.slot_bytes else ())
        if run.by_slot and ring_id != self._ring_id:
            self._drop(ring=True)
            self._ring_id = ring_id
        self._run, self._routes = run, routes
        if not run.by_slot:
            self._reserve_lanes(device_bytes)
        self.launches = self.captures = self.fallbacks = 0
        self.capture_s = 0.0

    def _reserve_lanes(self, nbytes: int) -> None:
        """Direct staging: a buffer of at least ``nbytes`` per stream, allocated (and a
        smaller one freed) in that stream's order; the graphs that held smaller ones go."""
        if self._lanes is None:
            self._lanes = LaneBuffers(self.pool, [route.h2d for route in self._routes])
        if len(self._lanes) and self._lanes.nbytes >= nbytes:
            return
        self._drop(ring=False)
        self._lanes.give_back()
        self._lanes.take(nbytes)

    def _free_lanes(self) -> None:
        """Free the streams' buffers in their streams' order (behind every launch there)."""
        if self._lanes is not None:
            self._lanes.give_back()

    def ring_signals(self, side: str) -> list[GpuSignal]:
        """The K slot signals of one side ("in": slot free, starts raised; "out": output
        ready). They live as long as the graphs whose host nodes post them; a run that
        ends normally leaves each back in its initial state, so the next run reuses them."""
        sigs = self._signals.get(side)
        if sigs is None:
            initial = 1 if side == "in" else 0
            sigs = self._signals[side] = [make_signal(self.recycle, self.device, initial=initial)
                                          for _ in range(self.slots)]
        return sigs

    @property
    def run_key(self) -> tuple:
        """The current run's part of a graph's key (staging, dtypes)."""
        assert self._run is not None
        return self._run.key

    # ------------------------------------------------------------------ per batch
    def graph_for(self, b: Any, slot: int, lane: int, src: int, dst: int) -> tuple[_Graph | None, float]:
        """Batch ``b``'s graph and the seconds spent capturing it now (0.0 when cached).
        None: the cache is full and this shape has no graph; run the batch without one."""
        r = self._run
        key = (r.key, slot if r.by_slot else lane, b.in_shape, b.out_shape)  # type: ignore[union-attr]
        g = self._cache.get(key)
        if g is not None:
            return g, 0.0
        if len(self._cache) >= self.max_graphs or (self._direct_unsupported and r.direct):  # type: ignore[union-attr]
            self.fallbacks += 1
            return None, 0.0
        t0 = time.perf_counter()
        g = self._capture(b, slot, lane, src, dst)
        dt = time.perf_counter() - t0
        self.capture_s += dt
        if g is None:
            self.fallbacks += 1
        else:
            self._cache[key] = g
            self.captures += 1
        return g, dt

    def launch(self, g: _Graph, src: int, dst: int, stream_h: Any) -> None:
        """Launch one batch: update the direct sides' host addresses, then cuGraphLaunch."""
        hot = self.hot
        if g.h2d is not None:
            u = g.h2d
            setattr(u.params, u.field, src)
            hot.graph_exec_memcpy_params(g.exec_h, u.node, u.params, self._ctx_h)
        if g.d2h is not None:
            u = g.d2h
            setattr(u.params, u.field, dst)
            hot.graph_exec_memcpy_params(g.exec_h, u.node, u.params, self._ctx_h)
        hot.graph_launch(g.exec_h, stream_h)
        for sig in g.signals:  # e.g. an event signal: one more record for its waiter
            sig.launched()
        self.launches += 1

    # ------------------------------------------------------------------ capture
    def _capture(self, b: Any, slot: int, lane: int, src: int, dst: int) -> _Graph | None:
        """Capture batch ``b``'s work on its lane's stream (nothing runs): the executor's
        own protocol, enqueued while the stream is captured. Then instantiate it.
        Returns None when a direct side's memcpy node cannot be found for updates."""
        d = drv.driver()
        r = self._run
        assert r is not None
        if self._ctx_h is None:
            ctx = drv.call("cuCtxGetCurrent")
            self._ctx_h = handle_int(ctx) if self.hot.native else ctx
        # the ring signals whose nodes the graph will hold
        held = tuple(self._signals[side][slot] for side, used in (("in", r.ring_in), ("out", r.ring_out)) if used)
        sh = self._routes[lane].stream.handle
        drv.call("cuStreamBeginCapture", sh, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        failure: BaseException | None = None
        ptr = y_ptr = 0
        try:
            ptr, y_ptr = self.protocol()(b, lane, slot, src, dst)
        except BaseException as exc:  # noqa: BLE001 - re-raised below, after the capture ended
            failure = exc
        graph, end_error = end_capture(sh)  # always: the stream must leave capture mode
        self.check_capture(graph, failure, end_error, b)
        exe = None
        try:
            h2d = None if r.ring_in else self._find_copy(graph, "h2d", src, ptr, b.in_bytes)
            d2h = None if (r.ring_out or not r.has_out) else self._find_copy(graph, "d2h", dst, y_ptr, b.out_bytes)
            if (not r.ring_in and h2d is None) or (r.has_out and not r.ring_out and d2h is None):
                self._direct_unsupported = (
                    "direct staging: the captured graph has no plain memcpy node for the batch's host "
                    "copy, so its host address cannot be updated per launch; those batches ran without a graph")
            else:
                try:
                    exe = drv.call("cuGraphInstantiate", graph, 0)
                except CudaError as exc:
                    raise GraphCaptureError(_capture_message(b, exc)) from exc
        finally:
            if exe is None:
                self._destroy(graph=graph)
        if exe is None:
            return None
        exec_h = handle_int(exe) if self.hot.native else exe
        return _Graph(graph, exe, exec_h, r.ring_in or r.ring_out, h2d, d2h, held)

    def protocol(self, alloc: Any = None, free: Any = None) -> Any:
        """The executor's per-batch protocol as a capture enqueues it: on the lane's one
        stream; device memory from the stream's own buffer (direct staging) or a
        stream-ordered allocation on the pool's handle (ring staging: it becomes a graph
        mem-alloc node, freed by the graph's own mem-free node); ring slots signalled by
        nodes that run on every launch; no timing events, no host waits.
        ``alloc``/``free``: the device memory instead (run_graphs.py: its own lane buffers)."""
        r = self._run
        assert r is not None
        hot = self.hot
        pool_h = handle_int(self.pool.handle) if hot.native else self.pool.handle
        if alloc is None and not r.by_slot and self._lanes is not None:  # direct staging: the stream's buffer
            alloc, free = self._lanes.allocate_ptr, self._lanes.free_ptr
        return batch_protocol(
            hot=hot, routes=self._routes, compute=r.compute, has_out=r.has_out, in_dtype=r.in_dtype,
            out_dtype=r.out_dtype,
            alloc=alloc or (lambda nbytes, stream_h: hot.alloc_from_pool(nbytes, pool_h, stream_h)),
            free=free or hot.free_async,
            free_in=[s.arm_in_capture for s in self._signals["in"]] if r.ring_in else None,
            ready_out=[s.arm_in_capture for s in self._signals["out"]] if r.ring_out else None,
            # (a capture takes no copy of pageable memory: no driver question per copy inside it)
            sources_pinned=True, destinations_pinned=True,
        )

    def check_capture(self, graph: Any, failure: BaseException | None, end_error: BaseException | None,
                      b: Any, whole_run: bool = False) -> None:
        """After a capture has ended: nothing when it worked; else the graph is destroyed
        and the error raised: GraphCaptureError for what the capture refused, the
        compute's own error (or Ctrl-C) as it would be without a graph."""
        if failure is None and end_error is None:
            return
        self._destroy(graph=graph)
        err = failure or end_error
        if isinstance(err, Exception) and (isinstance(err, CudaError) or end_error is not None):
            raise GraphCaptureError(_capture_message(b, err, whole_run)) from err
        raise err  # type: ignore[misc]

    def _find_copy(self, graph: Any, direction: str, host: int, dev: int, nbytes: int) -> _CopyUpdate | None:
        """The memcpy node that copies ``nbytes`` between ``host`` and ``dev``."""
        d = drv.driver()
        memcpy_type = int(d.CUgraphNodeType.CU_GRAPH_NODE_TYPE_MEMCPY)
        nodes, count = drv.call("cuGraphGetNodes", graph, 0)
        if count:
            nodes, count = drv.call("cuGraphGetNodes", graph, count)
        h_side, d_side = ("src", "dst") if direction == "h2d" else ("dst", "src")
        for node in nodes:
            if int(drv.call("cuGraphNodeGetType", node)) != memcpy_type:
                continue
            p = drv.call("cuGraphMemcpyNodeGetParams", node)
            try:
                h_type = _int(getattr(p, h_side + "MemoryType"))
                d_type = _int(getattr(p, d_side + "MemoryType"))
            except ValueError:  # cuda.bindings refuses to read an unset memory type: not ours
                continue
            if _int(p.WidthInBytes) != nbytes or d_type not in (_MEM_DEVICE, _MEM_UNIFIED):
                continue
            # An address may be stored as a base plus an x offset: compare their sum.
            field = {_MEM_HOST: h_side + "Host", _MEM_UNIFIED: h_side + "Device"}.get(h_type)
            h_x = _int(getattr(p, h_side + "XInBytes", 0))
            if field is None or _int(getattr(p, field)) + h_x != host:
                continue
            if _int(getattr(p, d_side + "Device")) + _int(getattr(p, d_side + "XInBytes", 0)) != dev:
                continue
            params = Memcpy3D()
            for name, _ in Memcpy3D._fields_:
                setattr(params, name, _int(getattr(p, name, 0)))
            setattr(params, h_side + "XInBytes", 0)  # launch() writes the whole host address
            return _CopyUpdate(handle_int(node) if self.hot.native else node, params, field)
        return None

    # ------------------------------------------------------------------ lifetime
    def _drop(self, *, ring: bool | None = None) -> None:
        """Destroy the cached graphs (only the ring ones with ring=True)."""
        for key, g in list(self._cache.items()):
            if ring is None or g.ring == ring:
                del self._cache[key]
                self._destroy(graph=g.graph, exe=g.exec)

    def _destroy(self, *, graph: Any = None, exe: Any = None) -> None:
        # An exec still in flight finishes first (cuGraphExecDestroy's contract).
        if exe is not None:
            drv.call("cuGraphExecDestroy", exe)
        if graph is not None:
            drv.call("cuGraphDestroy", graph)

    def clear(self) -> None:
        """Drop every cached graph (they are captured again when needed) and the streams'
        buffers."""
        self._drop()
        self._free_lanes()

    def after_abort(self, drained: bool) -> None:
        """A run failed: the ring signals' counts are unknown. Drop them with the ring
        graphs that post them; when the streams did not drain, a host node may still
        run some day, so keep their memory alive."""
        for key, g in list(self._cache.items()):
            if g.ring:
                del self._cache[key]
                try:
                    self._destroy(graph=g.graph, exe=g.exec)
                except Exception:  # a broken context (sticky error): nothing more to do
                    pass
        sigs = [s for side in self._signals.values() for s in side]
        if drained:
            for s in sigs:
                s.close()
        else:
            _ORPHANED.extend(sigs)
        self._signals = {}

    def close(self) -> None:
        """Destroy every graph and exec, close the signals, and give unused graph memory
        back to the driver. The pipeline's streams must have drained.

        Destroying an exec leaves its physical memory cached in the device's graph
        memory; ``cuDeviceGraphMemTrim`` returns it. The trim is device-wide but only
        frees blocks that no graph (of any library) is running or has scheduled."""
        self._drop()
        self._free_lanes()
        for side in self._signals.values():
            for s in side:
                s.close()
        self._signals = {}
        self._compute = None
        dev = drv.call("cuDeviceGet", int(getattr(self.device, "index", 0)))
        drv.call("cuDeviceGraphMemTrim", dev)

    def run_stats(self, batches: int) -> dict[str, Any]:
        reason = (f"{self.launches} of {batches} batches launched as CUDA graphs ({self.captures} captured "
                  f"this run, {len(self._cache)} cached); per-batch stage timing is not recorded in graph mode")
        if self.fallbacks:
            why = self._direct_unsupported or f"the cache holds at most {self.max_graphs} graphs"
            reason += f"; {self.fallbacks} batches ran without a graph: {why}"
        return {"graphs": len(self._cache), "launches": self.launches, "captures": self.captures,
                "capture_ms": self.capture_s * 1e3, "fallback_batches": self.fallbacks,
                "max_graphs": self.max_graphs, "reason": reason}


def _int(v: Any) -> int:
    return 0 if v is None else int(v)


def _capture_message(b: Any, exc: BaseException, whole_run: bool = False) -> str:
    what = (f"the whole run (a repeat of an earlier run; it failed at batch {b.index})" if whole_run
            else f"the work of batch {b.index}")
    return (
        f"graph=True: capturing {what} into a CUDA graph failed ({exc}). With graph=True "
        "the compute callable is called once per graph while its stream is being captured: it must only "
        "enqueue capturable work on the stream it is given (kernel launches, async copies and memsets, event "
        "records) and must not synchronize a stream, an event or the device, wait on the GPU from the host, "
        "or allocate memory outside stream order. Use graph=False for this compute."
    )
