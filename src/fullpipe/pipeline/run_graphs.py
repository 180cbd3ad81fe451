"""Whole-run CUDA graphs: a run that repeats an earlier one is launched as one graph.

With ``graph=True`` each batch is one graph launch (graphs.py). For pinned arrays
that still costs the host, per batch, two memcpy-node updates (the batch's host
addresses), the launch and the executor's Python around them: ~15 us on an H100
host. A run whose batches, host addresses and compute are those of an earlier run
(a serving loop that refills the same pinned buffers, the repeats of a benchmark)
can instead be captured whole, every lane's batches in one graph, and replayed with
one ``cuGraphLaunch``: its host cost per batch is that launch divided by the batches.

When: ``graph=True`` with the stream form, not ``synchronous``, and both sides
pinned (direct or bulk staging). Ring staging needs the host between batches (its
slots are filled and drained by threads, batch by batch), so ring runs stay one
graph per batch.

The key of a run is what its graph holds fixed: staging, dtypes, the lanes, and
for every batch its host addresses and shapes. The first run with a key goes batch
by batch (and is remembered); the second is captured and launched; later ones are
replays. Capturing on the second sighting, not the first, keeps one-off runs from
paying for a capture (the protocol enqueued once more, plus instantiation) that
nothing reuses. At most ``MAX_RUN_GRAPHS`` graphs are kept (the least recently used
is dropped).

The capture, on the lanes' streams::

    lane 0:  begin capture -- record fork --------------------------- wait joins -- end capture
    lane k:                   wait fork -- batch k, k+N, ... -- record join k
    (lane 0 enqueues its own batches 0, N, 2N, ... between fork and joins)

Each batch is the executor's protocol (H2D, compute, D2H), on its lane, in the
executor's issue order; the fork and joins make the lanes branches of one graph.
Device memory: one buffer per lane, sized for the largest batch of the cached runs,
taken from the pipeline's pool at the first capture and shared by every cached run
graph (``resources()["run_graph_bytes"]``); a lane's batches reuse it in graph order,
as the eager path's lanes do (lanes.py). Sharing is safe because every run graph is
launched on lane 0's stream and joins all its lanes before it ends: one launch
finishes before the next begins. A capture that needs larger buffers drops the
cached graphs (they point at the old ones), gives the old buffers back and takes
larger ones. Not the per-batch graphs' mem-alloc and mem-free nodes: ``cuGraphLaunch``
costs the host per node, and those two are 2 of a batch's 5.

As with per-batch graphs the compute is called only at capture; what it reads then
is frozen into the graph. A new compute object drops the cached runs, and
``StreamPipeline.reset_graphs()`` drops them by hand.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from typing import Any, Callable, Sequence

from ..cuda import driver as drv
from ..cuda import events as cuda_events
from ..cuda.hotpath import HotPath, handle_int
from ..errors import CudaError
from .graphs import BatchGraphs, GraphCaptureError, _capture_message, end_capture
from .lanes import LaneBuffers

MAX_RUN_GRAPHS = 4  # whole runs kept as graphs (together they hold one batch of device memory per lane)
MAX_SIGHTINGS = 64  # run keys remembered as seen once


def capture_forked(lanes: Sequence[Any], fork: Any, joins: Sequence[Any], enqueue: Callable[[], None]
                   ) -> tuple[Any, BaseException | None, BaseException | None]:
    """Capture what ``enqueue()`` puts on the streams ``lanes`` as one graph: lane 0 begins
    the capture and records ``fork``, the other lanes wait for it, and each lane ``k`` that
    took part records ``joins[k]`` for lane 0 to wait on, even after a failure (a capture
    ends on its origin stream, with every forked stream joined). Never raises: returns the
    graph (None where the end failed), the first failure while enqueueing or joining, and
    the end's own error."""
    origin = lanes[0]
    d = drv.driver()
    drv.call("cuStreamBeginCapture", origin, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
    failure: BaseException | None = None
    joined = 1
    try:
        drv.call("cuEventRecord", fork, origin)
        for lane in range(1, len(lanes)):
            drv.call("cuStreamWaitEvent", lanes[lane], fork, 0)
            joined += 1
        enqueue()
    except BaseException as exc:  # noqa: BLE001 - returned, for the caller to raise after the capture ended
        failure = exc
    for lane in range(1, joined):
        try:
            drv.call("cuEventRecord", joins[lane], lanes[lane])
            drv.call("cuStreamWaitEvent", origin, joins[lane], 0)
        except CudaError as exc:  # an invalidated capture refuses further work: end it below
            failure = failure or exc
    graph, end_error = end_capture(origin)
    return graph, failure, end_error


@dataclasses.dataclass
class _RunGraph:
    graph: Any  # CUgraph
    exec: Any  # CUgraphExec
    exec_h: Any  # what HotPath takes


class RunGraphs:
    """The whole-run graphs of one StreamPipeline: which runs were seen, which are
    cached, their capture and launch. ``batch_graphs`` supplies the per-batch protocol
    as a capture enqueues it (graphs.py); ``device``: where the fork/join events live."""

    def __init__(self, batch_graphs: BatchGraphs, hot: HotPath, device: Any, pool: Any, origin_h: Any,
                 max_graphs: int | None = None, enabled: bool = True):
        self.batch_graphs, self.hot, self.device = batch_graphs, hot, device
        self.pool, self.origin_h = pool, origin_h  # lane 0's stream handle: lane buffers live in its order
        self.enabled = enabled  # False: graph="batch", every run batch by batch
        self.max_graphs = MAX_RUN_GRAPHS if max_graphs is None else max_graphs
        self._cache: collections.OrderedDict[tuple, _RunGraph] = collections.OrderedDict()
        self._seen: collections.OrderedDict[tuple, None] = collections.OrderedDict()
        self._compute: Any = None
        self._events: list[Any] = []  # fork, then one join per lane (non-timing, made at the first capture)
        self._lanes: LaneBuffers | None = None  # the lanes' device buffers every cached graph uses
        self.last = "none"  # what the last run did: none / seen / captured / replayed
        self.capture_s = 0.0

    def __len__(self) -> int:
        return len(self._cache)

    @property
    def nbytes(self) -> int:
        """Device memory the cached run graphs hold (pool memory)."""
        return self._lanes.held_bytes if self._lanes is not None else 0

    # ------------------------------------------------------------------ per run
    def key(self, compute: Any, run_key: tuple, lanes: int, batches: Sequence[Any]) -> tuple:
        """What a run's graph would hold fixed. A new compute object drops every cached run."""
        if compute is not self._compute:
            self.clear()
            self._compute = compute
        return (run_key, lanes, tuple((b.src_addr, b.dst_addr, b.in_shape, b.out_shape) for b in batches))

    def lookup(self, key: tuple) -> _RunGraph | None:
        """The cached graph of this run (now the most recently used), or None."""
        g = self._cache.get(key)
        if g is not None:
            self._cache.move_to_end(key)
        return g

    def seen_before(self, key: tuple) -> bool:
        """True when a run with this key went before (capture it now); else remember it."""
        if key in self._seen:
            del self._seen[key]
            return True
        self._seen[key] = None
        while len(self._seen) > MAX_SIGHTINGS:
            self._seen.popitem(last=False)
        self.last = "seen"
        return False

    def capture(self, key: tuple, batches: Sequence[Any], routes: Sequence[Any], lane_bytes: int,
                at: list) -> _RunGraph:
        """Capture the whole run on the lanes' streams (nothing runs), instantiate it and
        cache it. ``lane_bytes``: the device memory of the run's largest batch. Raises
        GraphCaptureError when the capture fails (the compute's own error as is); the
        streams leave capture mode and nothing is kept either way. ``at[0]``: the
        position of the batch being captured (for the failure note)."""
        t0 = time.perf_counter()
        lanes = self._lanes_for([route.h2d for route in routes], lane_bytes)
        try:
            g = self._capture(batches, routes, lanes, at)
        except BaseException:
            if not self._cache:  # nothing else uses them
                self._give_back_lanes()
            raise
        self._cache[key] = g
        while len(self._cache) > self.max_graphs:
            _, old = self._cache.popitem(last=False)
            self._destroy(old)
        self.capture_s = time.perf_counter() - t0
        self.last = "captured"
        return g

    def _lanes_for(self, handles: list[Any], lane_bytes: int) -> LaneBuffers:
        """The shared lane buffers, holding at least ``lane_bytes`` for each of
        ``handles``. Larger or other buffers than the cached graphs use: those graphs
        are dropped (they point at the old buffers), which go back in stream order on
        lane 0 (behind every launch), and new ones are taken there."""
        lanes = self._lanes
        if lanes is not None and lanes.nbytes >= lane_bytes and set(handles) <= set(lanes.handles):
            return lanes
        all_handles = handles
        if lanes is not None:  # (grown by a quarter at least: runs whose batches creep up do not thrash)
            all_handles = list(dict.fromkeys([*lanes.handles, *handles]))
            lane_bytes = max(lane_bytes, lanes.nbytes + lanes.nbytes // 4)
        self._drop_graphs()
        self._give_back_lanes()
        # on lane 0's stream: ordered before every launch (they go there too)
        lanes = LaneBuffers(self.pool, all_handles, order_h=self.origin_h)
        try:
            lanes.take(lane_bytes)
        except BaseException:
            lanes.give_back()
            raise
        self._lanes = lanes
        return lanes

    def _give_back_lanes(self) -> None:
        if self._lanes is not None:
            self._lanes.give_back()
            self._lanes = None

    def _capture(self, batches: Sequence[Any], routes: Sequence[Any], lanes: LaneBuffers, at: list) -> _RunGraph:
        enqueue = self.batch_graphs.protocol(alloc=lanes.allocate_ptr, free=lanes.free_ptr)
        N = len(routes)
        if len(self._events) < N + 1:
            self._events = [cuda_events.create_event(self.device, timing=False) for _ in range(N + 1)]
        fork, joins = self._events[0].handle, [ev.handle for ev in self._events[1:]]

        def enqueue_all() -> None:
            for pos, b in enumerate(batches):
                at[0] = pos
                enqueue(b, pos % N, 0, b.src_addr, b.dst_addr)

        graph, failure, end_error = capture_forked([route.stream.handle for route in routes], fork, joins,
                                                   enqueue_all)
        b = batches[at[0]]
        self.batch_graphs.check_capture(graph, failure, end_error, b, whole_run=True)
        try:
            exe = drv.call("cuGraphInstantiate", graph, 0)
        except CudaError as exc:
            drv.call("cuGraphDestroy", graph)
            raise GraphCaptureError(_capture_message(b, exc, whole_run=True)) from exc
        return _RunGraph(graph, exe, handle_int(exe) if self.hot.native else exe)

    def launch(self, g: _RunGraph, stream_h: Any) -> None:
        """The whole run: one cuGraphLaunch on lane 0's stream (its branches fan out to
        the copy engines and SMs as the lanes' streams would)."""
        self.hot.graph_launch(g.exec_h, stream_h)
        if self.last != "captured":
            self.last = "replayed"

    def begin_run(self) -> None:
        self.last = "none"
        self.capture_s = 0.0

    # ------------------------------------------------------------------ lifetime
    def _destroy(self, g: _RunGraph) -> None:
        # A launch still in flight finishes first (cuGraphExecDestroy's contract).
        drv.call("cuGraphExecDestroy", g.exec)
        drv.call("cuGraphDestroy", g.graph)

    def _drop_graphs(self) -> None:
        while self._cache:
            _, g = self._cache.popitem()
            self._destroy(g)

    def clear(self) -> None:
        """Drop every cached run graph, their lane buffers (freed on lane 0's stream,
        behind every launch) and every remembered run."""
        self._drop_graphs()
        self._give_back_lanes()
        self._seen.clear()

    def close(self) -> None:
        """Destroy the graphs and the events. The pipeline's streams must have drained;
        BatchGraphs.close() trims the device's graph memory after this."""
        self.clear()
        for ev in self._events:
            ev.close()
        self._events = []
        self._compute = None

    def stats(self, per_batch: dict[str, Any]) -> dict[str, Any]:
        """The run's ``stats.graph``: graphs.py's per-batch counts plus what this module
        did (``run_graph``: none / seen / captured / replayed)."""
        why = {"none": "" if self.enabled else "; graph='batch': never a whole run as one graph",
               "seen": "; first run with these batches and host addresses: the next such run is captured whole",
               "captured": "", "replayed": ""}[self.last]
        out = dict(per_batch, run_graph=self.last, run_graphs=len(self._cache),
                   run_capture_ms=self.capture_s * 1e3)
        if self.last in ("captured", "replayed"):
            out["reason"] = (
                f"the whole run launched as one CUDA graph ({self.last}: the same batches, host addresses and "
                f"compute as an earlier run; {len(self._cache)} run graphs cached); per-batch stage timing is not "
                "recorded in graph mode")
        else:
            out["reason"] = per_batch["reason"] + why
        return out
