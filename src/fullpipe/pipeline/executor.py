"""The level-1 stream pipeline: host batches through H2D -> compute -> D2H on N
non-blocking streams, so that both copy engines and the SMs work at once.

The host-driver pattern, for batch j on stream ``j % N``::

    buf = pool.allocate(in + out bytes, s)   # stream-ordered (cudaMallocAsync)
    H2D(buf.in <- host slot or pinned input, s)
    [release the input slot when the stream gets here: host function or event]
    compute(s, x, y)                         # user callable or a fullpipe kernel
    D2H(host slot or pinned output <- buf.out, s)
    [tell the drain thread the output slot is ready]
    pool.free(buf, s)                        # stream-ordered (cudaFreeAsync)

All of it is enqueued without waiting: the CPU runs ahead to batch j+1 at once.
Nothing inside the loop synchronizes a stream or the device; the only waits are
the CPU staging threads waiting for "slot free" flags raised by the GPU, and one
wait at the end. The sequence above is written once, in protocol.py, and used
as is by every mode: plain streams, copy_streams (other streams per step, joined
by events) and graph=True (graphs.py captures it once per shape and launches it
as one cuGraphLaunch per batch). See staging.py (the ring and its signals),
pageable.py (CPU threads for pageable arrays), tuning.py (chunk="auto"), stats.py
(what a run did).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import threading
import time
from typing import Any, Callable, Sequence

import numpy as np

from ..cuda import driver as drv
from ..cuda.hotpath import HotPath, handle_int
from ..cuda.memory import DeviceArray, is_pinned, pinned_empty
from . import plan as P
from .pageable import HostCopier, InputStager, OutputDrainer, default_copy_threads, short_switch_interval
from .graphs import BatchGraphs, GraphRun
from .stats import BatchTiming, PipelineStats, busy_from_timings
from ..trace import nvtx
from .staging import SlotRing, check_recycle, make_signal
from .protocol import DeferredFree, Route, batch_protocol
from .tuning import ChunkChoice, StageModel, choose_chunk, chunk_rows, parse_chunk, probe_rows

STAGING_MODES = ("auto", "ring", "direct")

ComputeFn = Callable[[Any, DeviceArray, "DeviceArray | None"], Any]


class StreamPipeline:
    """Push host arrays through H2D -> compute -> D2H on ``streams`` non-blocking streams.

    >>> pipe = StreamPipeline(compute=fn, streams=3, chunk="auto")
    >>> y = pipe.run(x)                  # one array, cut into chunks along axis 0
    >>> ys = pipe.run_batches([a, b, c])  # a sequence of batches (sizes may differ)
    >>> print(pipe.stats)

    ``compute(stream, x, y)`` gets the cuda.core ``Stream`` (it has ``__cuda_stream__``)
    and :class:`~fullpipe.cuda.memory.DeviceArray` views of the batch's input and
    output (``__cuda_array_interface__``: ``torch.as_tensor(x, device="cuda")`` and
    ``cupy.asarray(x)`` see them without a copy). It must enqueue its work on that
    stream (e.g. ``torch.cuda.ExternalStream(int(stream.handle))``) and write ``y``
    (None with ``output=None``). The views are valid only for work enqueued during the
    call. ``compute=None`` copies the input back (``y`` is ``x``).

    Options:

    - ``streams``: N >= 1 streams, batches round-robin over them.
    - ``copy_streams``: False (default): each batch's copies and compute go on its own
      stream. True: every H2D goes on one copy stream and every D2H on another, with
      compute round-robin over the N streams, joined by events (two records and two
      waits more per batch). A copy engine then sees its copies back to back in one
      queue instead of N streams' queues; on an H200 the CUPTI trace of the plain
      layout shows 8-17 us idle gaps between copies of different streams, and this
      layout reaches 0.96-0.99x the copy bound instead of 0.90-0.94x (overlap
      experiment). Stage times in the stats then include queueing behind the
      previous batch's copy or compute.
    - ``chunk``: rows per chunk for :meth:`run`, a size (``"8MiB"``), or ``"auto"``
      (measure the first chunks; see :mod:`fullpipe.pipeline.tuning`).
    - ``slots``: K pinned slots each way in the staging ring used for pageable arrays.
    - ``recycle``: how a slot comes back: ``"hostfn"`` (a native host function posts a
      semaphore), ``"pyhostfn"`` (a Python host function), ``"event"``.
    - ``staging``: ``"auto"`` (pinned arrays are copied directly, pageable ones through
      the ring), ``"ring"`` (always the ring), ``"direct"`` (hand every array to
      cuMemcpyAsync as is: pageable memory then blocks; a baseline for experiments).
    - ``output``: ``"same"`` (like the input), ``None`` (no output), or
      ``(row_shape, dtype)``.
    - ``timing``: record four events per batch for per-stage stats (a few us per batch).
    - ``synchronous``: wait for each batch before the next (the serial baseline).
    - ``pool``: a :class:`~fullpipe.DevicePool` (one is made if not given).
    - ``graph``: False (default). True: the per-batch sequence (allocate, H2D, slot
      signal, compute, D2H, signal, free) is captured once into a CUDA graph per lane
      and batch shape, and each later batch of that shape is one ``cuGraphLaunch``
      (ring staging; direct staging adds two memcpy-node updates) instead of five to
      seven driver calls. See :mod:`fullpipe.pipeline.graphs`. Consequences:
      ``compute`` is called only when a graph is captured (once per slot or stream
      and shape), with the stream being captured: it must enqueue only capturable
      work (no synchronization; a failed capture raises ``GraphCaptureError``, a
      ValueError) and whatever it reads when called is frozen into the graph
      (:meth:`reset_graphs` after changing e.g. ``MixKernel.rounds``). ``timing`` is
      treated as False (a graph's nodes are fixed: no per-batch stage events; no
      ``busy_ms``). The device buffers are graph memory, not ``pool`` memory (the
      pool's usage does not move; :meth:`close` gives the graph memory back). At most
      64 graphs are cached; batches of further new shapes run without a graph.
      ``stats.graph`` says how many batches were launched, captured, or fell back.
      Not combined with ``copy_streams=True`` or ``staging="direct"`` yet.

    On an exception in compute, a CUDA error, or Ctrl-C, the run drains what is in
    flight, frees every device allocation it made, gives back the ring, and re-raises
    the exception with a note naming the batch (also as ``exc.batch_index``).
    """

    def __init__(
        self,
        compute: ComputeFn | None = None,
        *,
        streams: int = 3,
        chunk: int | str = "auto",
        slots: int = 4,
        recycle: str = "hostfn",
        staging: str = "auto",
        output: Any = "same",
        timing: bool = True,
        synchronous: bool = False,
        copy_streams: bool = False,
        pool: Any = None,
        device: Any = None,
        copy_threads: int | None = None,
        graph: bool = False,
    ):
        if compute is not None and not callable(compute):
            raise TypeError(f"compute must be callable as compute(stream, x, y), got {type(compute).__name__}")
        self.compute = compute
        self.n_streams = P.check_positive_int(streams, "streams", "use 1 for a single stream")
        self.chunk = parse_chunk(chunk)
        self.slots = P.check_positive_int(slots, "slots", "the ring needs at least one pinned slot")
        self.recycle = check_recycle(recycle)
        if staging not in STAGING_MODES:
            raise ValueError(f"staging must be one of {STAGING_MODES}, got {staging!r}")
        self.staging = staging
        self.output = P.parse_output(output)
        if compute is None and (self.output.row_shape is not None or self.output.dtype is not None):
            raise ValueError("compute=None copies the input back unchanged: output must be 'same' or None")
        self.timing = bool(timing)
        self.synchronous = bool(synchronous)
        self.copy_streams = bool(copy_streams)
        if not isinstance(graph, bool):
            raise TypeError(f"graph must be True or False, got {graph!r}")
        if graph and self.copy_streams:
            raise ValueError(
                "graph=True and copy_streams=True are not combined yet: copy_streams spreads each batch over "
                "three streams joined by events and frees its buffer batches later on another stream, while "
                "a per-batch graph is one launch on one stream. Use one of the two.")
        if graph and staging == "direct":
            raise ValueError(
                "graph=True with staging='direct' is not supported: that mode hands pageable arrays to "
                "cuMemcpyAsync as is, which a graph's memcpy node cannot hold. Use staging='auto' (pinned "
                "arrays are copied directly, pageable ones through the ring) or 'ring'.")
        self.graph = graph
        self.copy_threads = (default_copy_threads() if copy_threads is None
                             else P.check_positive_int(copy_threads, "copy_threads"))
        self._device = device
        self._pool = pool
        self._owns_pool = pool is None
        self._started = False
        self._running = False
        self.stats: PipelineStats | None = None
        self.probe_stats: PipelineStats | None = None

    # ------------------------------------------------------------------ lifetime
    def _start(self) -> None:
        if self._started:
            return
        from ..cuda.device import Device
        from ..cuda.events import create_event
        from ..cuda.pool import DevicePool
        from ..cuda.streams import long_lived_streams

        if self._device is None:
            self._device = Device(0)
        self.device = self._device
        if self._pool is None:
            self._pool = DevicePool(self.device, release_threshold="max")
        self.pool = self._pool
        # Long-lived streams, shared with later pipelines: see streams.long_lived_streams.
        n_all = self.n_streams + (2 if self.copy_streams else 0)
        self._all_streams = long_lived_streams(self.device, n_all)
        self.streams = self._all_streams[:self.n_streams]  # compute (and, by default, copies)
        self._handles = [s.handle for s in self._all_streams]
        # The per-batch driver calls go through libcuda directly (cuda/hotpath.py);
        # handles are then plain ints.
        self._hot = HotPath()
        self._hs = [handle_int(h) for h in self._handles] if self._hot.native else list(self._handles)
        # Which stream each step of a lane's batches goes on (protocol.Route).
        # copy_streams: every H2D on one stream, every D2H on another, compute on the
        # lane's stream; reusable non-timing events hand a batch from the H2D stream to
        # its compute stream (one event, always recorded on the H2D stream) and from there
        # to the D2H stream (one event per compute stream). A wait takes the event's state
        # when it is enqueued, so the next record may follow at once; each event is only
        # ever recorded on one stream, so its records also complete in order. Buffers are
        # freed _lag batches later on the H2D stream (protocol.DeferredFree).
        N = self.n_streams
        self._lag = max(4, N + 2)
        self._handoff = [create_event(self.device, timing=False) for _ in range(1 + N + self._lag)]
        self._handoff_h = [handle_int(e.handle) if self._hot.native else e.handle for e in self._handoff]
        if self.copy_streams:
            s_in, s_out, h_in, h_out = self._all_streams[N], self._all_streams[N + 1], self._hs[N], self._hs[N + 1]
            self._routes = [Route(s_in, s, s_out, h_in, h, h_out, h2d_done=self._handoff_h[0],
                                  compute_done=self._handoff_h[1 + k])
                            for k, (s, h) in enumerate(zip(self.streams, self._hs))]
        else:
            self._routes = [Route.one_stream(s, h) for s, h in zip(self.streams, self._hs)]
        self._ring_in = SlotRing(self.slots)
        self._ring_out = SlotRing(self.slots)
        self._copier_in: HostCopier | None = None
        self._copier_out: HostCopier | None = None
        self._free_events: list[tuple[Any, Any]] = []
        self._events_out = 0
        self._start_event = create_event(self.device, timing=True)
        self._end_event = create_event(self.device, timing=True)
        # Non-timing events that stream 0 waits on at the end of a run, one per stream.
        self._join_events = [create_event(self.device, timing=False) for _ in range(len(self._all_streams))]
        self._create_event = create_event
        driver = drv.driver()
        self._drv = driver
        self._SUCCESS = driver.CUresult.CUDA_SUCCESS
        self._NOT_READY = driver.CUresult.CUDA_ERROR_NOT_READY
        self._graphs = (BatchGraphs(pool=self.pool, device=self.device, hot=self._hot, recycle=self.recycle,
                                    slots=self.slots) if self.graph else None)
        self._started = True

    def close(self) -> None:
        """Free the pinned ring, the events, the copy threads and (if it made it) the pool."""
        if not self._started:
            return
        for s in self._all_streams:
            with drv.translated("cuStreamSynchronize"):
                s.sync()
        if self._graphs is not None:  # before the ring: the graphs hold its slot addresses
            self._graphs.close()
            self._graphs = None
        self._ring_in.free()
        self._ring_out.free()
        for c in (self._copier_in, self._copier_out):
            if c is not None:
                c.close()
        for ev, _ in self._free_events:
            ev.close()
        self._free_events = []
        for ev in (self._start_event, self._end_event, *self._join_events, *self._handoff):
            ev.close()
        if self._owns_pool:
            self.pool.close()
            self._pool = None
        self._started = False

    def __enter__(self) -> "StreamPipeline":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"StreamPipeline(streams={self.n_streams}, chunk={self.chunk!r}, slots={self.slots}, "
            f"recycle={self.recycle!r}, staging={self.staging!r})"
        )

    def resources(self) -> dict[str, Any]:
        """What the pipeline holds now, for leak checks: pool usage, live allocations,
        timing events out, whether a run holds the ring, pinned bytes, pending Python
        host functions."""
        from ..cuda.hostfn import pending_count

        d: dict[str, Any] = {"running": self._running, "python_host_functions_pending": pending_count()}
        if self._started:
            s = self.pool.stats()
            d.update(
                pool_used_bytes=s.used_bytes,
                pool_allocations=s.allocations,
                timing_events_out=self._events_out,
                pinned_slots_free=0 if self._running else 2 * self.slots,
                pinned_ring_bytes=self._ring_in.pinned_bytes + self._ring_out.pinned_bytes,
            )
            if self._graphs is not None:
                d["graph_execs"] = len(self._graphs)
        return d

    def reset_graphs(self) -> None:
        """graph=True: drop the cached CUDA graphs, so that the next batches capture the
        compute again (after changing something it reads when called)."""
        if self._started and self._graphs is not None:
            for s in self._all_streams:
                with drv.translated("cuStreamSynchronize"):
                    s.sync()
            self._graphs.clear()

    # ------------------------------------------------------------------ public runs
    def run(self, x: Any, out: np.ndarray | None = None) -> np.ndarray | None:
        """Run one host array, cut into chunks along axis 0. Returns the output array
        (``out`` if given; else a new one, pinned if ``x`` is pinned), or None with
        ``output=None``."""
        x = P.as_host_array(x, "input")
        self._check_input_dtype(x.dtype)
        spec = self.output
        out_shape = None if spec.none else spec.shape_for(x.shape)
        out_dtype = None if spec.none else spec.dtype_for(x.dtype)
        if spec.none and out is not None:
            raise ValueError("out given, but the pipeline has output=None")
        if out is not None:
            P.check_output(out, out_shape, out_dtype)  # type: ignore[arg-type]
        rows = x.shape[0]
        row_bytes = x.nbytes // rows
        fixed_rows = None if self.chunk == "auto" else chunk_rows(self.chunk, row_bytes, rows)
        self._start()
        in_pinned = self._pinned(x)
        if out is None and not spec.none:
            out = pinned_empty(out_shape, out_dtype) if in_pinned else np.empty(out_shape, out_dtype)
        stage_in = self._staging_mode(in_pinned)
        stage_out = None if out is None else self._staging_mode(self._pinned(out))
        start = 0
        choice: ChunkChoice | None = None
        self.probe_stats = None
        n_probe = 0
        if fixed_rows is None:
            with nvtx.range("fullpipe.pipeline: chunk='auto' probes"):
                fixed_rows, choice, start, n_probe = self._tune(x, out, rows, row_bytes, stage_in, stage_out)
        bounds = P.chunk_bounds(rows, fixed_rows, start)
        batches = P.batches_from_array(x, out, bounds, first_index=n_probe)
        with nvtx.range(f"fullpipe.pipeline: {len(batches)} batches on {self.n_streams} streams"):
            stats = self._execute(batches, stage_in, stage_out) if batches else PipelineStats()
        stats.chunk = {"rows": fixed_rows, "bytes": fixed_rows * row_bytes}
        if choice is not None:
            stats.chunk.update(choice.as_dict())
            stats.chunk["probe_batches"] = n_probe
        self.stats = stats
        return out

    def run_batches(self, batches: Sequence[Any], outs: Sequence[np.ndarray] | None = None) -> list[np.ndarray] | None:
        """Run a sequence of host batches (sizes may differ). Returns their outputs
        (``outs`` if given, else new pageable arrays), or None with ``output=None``."""
        items, out_arrays, _ = P.batches_from_list(batches, outs, self.output)
        self._check_input_dtype(items[0].src.dtype)
        self._start()
        stage_in = self._staging_mode(all(self._pinned(b.src) for b in items))
        stage_out = None
        if out_arrays is not None:
            stage_out = self._staging_mode(all(self._pinned(o) for o in out_arrays))
        self.probe_stats = None
        with nvtx.range(f"fullpipe.pipeline: {len(items)} batches on {self.n_streams} streams"):
            self.stats = self._execute(items, stage_in, stage_out)
        return out_arrays

    # ------------------------------------------------------------------ helpers
    def _check_input_dtype(self, dtype: np.dtype) -> None:
        want = getattr(self.compute, "input_dtype", None)
        if want is not None and np.dtype(want) != dtype:
            raise ValueError(f"{type(self.compute).__name__} takes {np.dtype(want)} input, got {dtype}")

    def _pinned(self, arr: np.ndarray) -> bool:
        try:
            return bool(is_pinned(arr))
        except Exception:
            return False

    def _staging_mode(self, pinned: bool) -> str:
        if self.staging == "auto":
            return "direct" if pinned else "ring"
        return self.staging

    def _worker_setup(self) -> None:
        """Run first on each staging thread: event waits need the device's context current."""
        if self.recycle == "event":
            self.device.set_current()

    def _copier(self, direction: str) -> HostCopier:
        attr = "_copier_in" if direction == "in" else "_copier_out"
        if getattr(self, attr) is None:
            setattr(self, attr, HostCopier(self.copy_threads))
        return getattr(self, attr)

    def _events(self) -> list[tuple[Any, Any]]:
        while len(self._free_events) < 4:
            ev = self._create_event(self.device, timing=True)
            self._free_events.append((ev, handle_int(ev.handle) if self._hot.native else ev.handle))
        got = self._free_events[-4:]
        del self._free_events[-4:]
        self._events_out += 4
        return got

    def _give_back_events(self, evs: list[tuple[Any, Any]]) -> None:
        self._free_events.extend(evs)
        self._events_out -= len(evs)

    def _check(self, name: str, result: Any) -> Any:
        if result[0] != self._SUCCESS:
            raise drv.error_from_code(name, result[0])
        return result[1] if len(result) > 1 else None

    # ------------------------------------------------------------------ chunk="auto"
    def _tune(self, x, out, rows, row_bytes, stage_in, stage_out) -> tuple[int, ChunkChoice, int, int]:
        """Run the probe chunks (real rows of x, kept), fit per-stage models, choose."""
        probes = probe_rows(rows, row_bytes)
        if not probes:
            per = max(1, -(-rows // (2 * self.n_streams)))
            reason = (f"input is {x.nbytes / 2**20:.1f} MiB, too small to probe: split into "
                      f"{-(-rows // per)} chunks (two per stream)")
            return per, ChunkChoice(per * row_bytes, per, "unknown", float("nan"), reason), 0, 0
        bounds, a = [], 0
        for r in probes:
            bounds.append((a, a + r))
            a += r
        pst = self._probe(P.batches_from_array(x, out, bounds), stage_in, stage_out)
        self.probe_stats = pst
        t1, t2 = pst.timings[1], pst.timings[2]
        n1, n2 = bounds[1][1] - bounds[1][0], bounds[2][1] - bounds[2][0]
        stages = ["h2d"] + (["compute"] if self.compute is not None else []) + ([] if out is None else ["d2h"])
        models = {}
        for st in stages:
            d1 = (t1.stage(st)[1] - t1.stage(st)[0]) / 1e3
            d2 = (t2.stage(st)[1] - t2.stage(st)[0]) / 1e3
            models[st] = StageModel.fit(n1 * row_bytes, d1, n2 * row_bytes, d2)
        host_s = min(pst.enqueue_us[1:]) * 1e-6 if len(pst.enqueue_us) > 1 else 20e-6
        free, _ = self.device.memory_info()
        out_ratio = 0.0 if out is None else (out.nbytes / out.shape[0]) / row_bytes
        choice = choose_chunk(
            models, total_bytes=(rows - a) * row_bytes, row_bytes=row_bytes, streams=self.n_streams,
            host_s=host_s, device_budget_bytes=free // 2, out_over_in=out_ratio,
            buffers_in_flight=(self._lag + 1) if self.copy_streams else None,
        )
        return choice.rows, choice, a, len(probes)

    def _probe(self, batches: list[P.Batch], stage_in: str, stage_out: str | None) -> PipelineStats:
        """A probe run for chunk="auto": each batch waits for the previous one, with
        per-stage timing events, never as a graph (the stage times are what it is for)."""
        return self._execute(batches, stage_in, stage_out, PROBE_RUN)

    def _run_mode(self) -> RunMode:
        # A graph's nodes are fixed: no per-batch timing events in graph mode.
        return RunMode(timing=self.timing and not self.graph, synchronous=self.synchronous, graphs=self.graph)

    # ------------------------------------------------------------------ the loop
    def _execute(self, batches: list[P.Batch], stage_in: str, stage_out: str | None,
                 mode: RunMode | None = None) -> PipelineStats:
        """Enqueue every batch (the host-driver pattern of the module docstring), wait
        once at the end, and return what the run did."""
        mode = self._run_mode() if mode is None else mode
        n, K, N = len(batches), self.slots, self.n_streams
        ring_in, ring_out, has_out = stage_in == "ring", stage_out == "ring", stage_out is not None
        stats = PipelineStats(
            batches=n, streams=N, slots=K, recycle=self.recycle, copy_streams=self.copy_streams,
            staging={"input": stage_in, "output": stage_out or "none"},
            bytes_in=sum(b.in_bytes for b in batches), bytes_out=sum(b.out_bytes for b in batches),
        )
        if ring_in:
            self._ring_in.ensure(max(b.in_bytes for b in batches))
        if ring_out:
            self._ring_out.ensure(max(b.out_bytes for b in batches))
        stats.pinned_ring_bytes = (self._ring_in.pinned_bytes if ring_in else 0) + (
            self._ring_out.pinned_bytes if ring_out else 0)
        in_dtype = batches[0].src.dtype
        out_dtype = batches[0].dst.dtype if has_out else None
        gx = self._graphs if mode.graphs else None  # graph=True: see graphs.py
        if gx is not None:
            gx.begin_run(GraphRun.of(self.compute, stage_in, stage_out, in_dtype, out_dtype),
                         self._routes, self._ring_in, self._ring_out)

        run = _Run(batches, stop=threading.Event())
        self._running = True
        switch = short_switch_interval() if (ring_in or ring_out) else contextlib.nullcontext()
        drained = True
        pos, b = 0, batches[0]
        t_start = time.perf_counter()
        try:
            with switch:
                enqueue = self._open_run(run, mode, gx, ring_in, ring_out, has_out, in_dtype, out_dtype)
                stager, drainer, routes, hs = run.stager, run.drainer, self._routes, self._hs
                ring_in_addr, ring_out_addr = self._ring_in.address, self._ring_out.address
                synchronous, timing = mode.synchronous, mode.timing
                enqueue_us = run.enqueue_us
                t_loop = time.perf_counter()
                for pos, b in enumerate(batches):
                    lane, slot = pos % N, pos % K
                    # ---- host side: the input in its slot (the stager's work), the output's address
                    if ring_in:
                        tw = time.perf_counter()
                        stager.take(pos)  # type: ignore[union-attr]
                        run.wait_s += time.perf_counter() - tw
                        src = ring_in_addr(slot)
                    else:
                        src = b.src_addr
                    dst = ring_out_addr(slot) if ring_out else b.dst_addr
                    # ---- enqueue batch pos: its graph (graph=True), or the protocol; no waits
                    # but for the output slot (host wait) and no captures (capture_ms): run.off_s
                    off = run.off_s
                    t0 = time.perf_counter()
                    g = self._graph_for(run, gx, b, slot, lane, src, dst) if gx is not None else None
                    if g is not None:
                        gx.launch(g, src, dst, hs[lane])  # type: ignore[union-attr]
                    else:
                        enqueue(b, lane, slot, src, dst)
                    if ring_out:
                        drainer.submit(slot, b.dst_addr, b.out_bytes)  # type: ignore[union-attr]
                    t1 = time.perf_counter()
                    enqueue_us.append((t1 - t0 - (run.off_s - off)) * 1e6)
                    # ---- bookkeeping, off the critical path of the GPU
                    if timing:
                        self._harvest(run.inflight, run.timings, block=False)
                    if synchronous:
                        with drv.translated("cuStreamSynchronize"):
                            routes[lane].d2h_stream.sync()
                        run.wait_s += time.perf_counter() - t1
                if run.deferred is not None:
                    run.deferred.flush(self._routes[0].d2h)
                loop_s, loop_wait_s = time.perf_counter() - t_loop, run.wait_s
                stats.gpu_span_ms = self._finish_run(run)
        except BaseException as exc:
            released, drained = self._abort(run.live, run.stop, run.stager, run.drainer, run.inflight)
            if gx is not None:
                gx.after_abort(drained)
            _annotate(exc, b, pos, n, released, K)
            raise
        finally:
            if drained:
                for sig in run.signals:
                    sig.close()
            else:  # a host function may still run some day: keep its semaphore's memory alive
                _ORPHANED_SIGNALS.extend(run.signals)
            self._running = False
        stats.wall_ms = (time.perf_counter() - t_start) * 1e3
        stats.enqueue_us_per_batch = sum(run.enqueue_us) / n
        stats.loop_us_per_batch = max(loop_s - loop_wait_s, 0.0) * 1e6 / n
        stats.host_wait_ms = run.wait_s * 1e3
        stats.enqueue_us = run.enqueue_us
        stats.timings = run.timings
        if gx is not None:
            stats.graph = gx.run_stats(n)
        if run.timings:
            stats.busy_ms = busy_from_timings(run.timings, self.compute is not None, has_out)
        return stats

    def _open_run(self, run: "_Run", mode: RunMode, gx: BatchGraphs | None, ring_in: bool, ring_out: bool,
                  has_out: bool, in_dtype: Any, out_dtype: Any) -> Any:
        """Start the staging threads with the ring's slot signals, make every stream wait
        for one start event, and build this run's protocol."""
        K = self.slots
        free_in = ready_out = None
        if ring_in:
            if gx is not None:  # graph mode: the graphs' host nodes post these: they outlive the run
                free_in = gx.ring_signals("in")
            else:
                free_in = [make_signal(self.recycle, self.device, initial=1) for _ in range(K)]
                run.signals += free_in
            run.stager = InputStager(self._ring_in, free_in, [bb.src for bb in run.batches], self._copier("in"),
                                     run.stop, on_start=self._worker_setup)
            run.stager.start()
        if ring_out:
            if gx is not None:
                ready_out = gx.ring_signals("out")
            else:
                ready_out = [make_signal(self.recycle, self.device, initial=0) for _ in range(K)]
                run.signals += ready_out
            run.drainer = OutputDrainer(self._ring_out, ready_out, [threading.Semaphore(1) for _ in range(K)],
                                        self._copier("out"), run.stop, on_start=self._worker_setup)
            run.drainer.start()
        # One start event that every stream waits for: a common time origin.
        d, handles, start_h = self._drv, self._handles, self._start_event.handle
        self._check("cuEventRecord", d.cuEventRecord(start_h, handles[0]))
        for h in handles[1:]:
            self._check("cuStreamWaitEvent", d.cuStreamWaitEvent(h, start_h, 0))
        if self.copy_streams:
            run.deferred = DeferredFree(self.pool, self._hot, self._handoff_h[1 + self.n_streams:], run.live)
        return batch_protocol(
            hot=self._hot, routes=self._routes, compute=self.compute, has_out=has_out, in_dtype=in_dtype,
            out_dtype=out_dtype, alloc=self.pool.allocate_ptr, free=self.pool.free_ptr, deferred=run.deferred,
            live=run.live, free_in=None if free_in is None else [sig.arm for sig in free_in],
            ready_out=None if ready_out is None else [sig.arm for sig in ready_out],
            stage_events=run.stage_events(self._events) if mode.timing else None,
            acquire_out=run.acquire_out if ring_out else None,
        )

    def _graph_for(self, run: "_Run", gx: BatchGraphs, b: P.Batch, slot: int, lane: int, src: int,
                   dst: int) -> Any:
        """graph=True: batch b's graph, captured on first use (the capture's time is not
        enqueue time: stats.graph["capture_ms"]), or None: run it through the protocol.
        The graph writes the output slot, and a capture records its signal: the drain
        thread must be done with the slot before either."""
        drainer = run.drainer
        if drainer is not None:
            run.acquire_out(slot)
        g, capture_s = gx.graph_for(b, slot, lane, src, dst)
        run.off_s += capture_s
        if g is None and drainer is not None:  # the protocol acquires it again
            drainer.free[slot].release()
        return g

    def _finish_run(self, run: "_Run") -> float:
        """The one wait at the end: join every stream into stream 0, wait for the end
        event and the staging threads, read the last stage times. Returns the GPU span
        (ms, start event to end event)."""
        d, handles = self._drv, self._handles
        start_h, end_h = self._start_event.handle, self._end_event.handle
        for i in range(1, len(handles)):
            j_ev = self._join_events[i].handle
            self._check("cuEventRecord", d.cuEventRecord(j_ev, handles[i]))
            self._check("cuStreamWaitEvent", d.cuStreamWaitEvent(handles[0], j_ev, 0))
        self._check("cuEventRecord", d.cuEventRecord(end_h, handles[0]))
        tw = time.perf_counter()
        if run.drainer is not None:
            run.drainer.finish()
            run.drainer.wait_done()
        self._check("cuEventSynchronize", d.cuEventSynchronize(end_h))
        if run.stager is not None:
            run.stager.join()
            run.stager.raise_error()
        run.wait_s += time.perf_counter() - tw
        self._harvest(run.inflight, run.timings, block=True)
        return self._check("cuEventElapsedTime", d.cuEventElapsedTime(start_h, end_h))

    def _harvest(self, inflight: collections.deque, timings: list[BatchTiming], block: bool) -> None:
        """Read the stage times of batches whose last event has completed (in order)."""
        d, start_h = self._drv, self._start_event.handle
        while inflight:
            index, evs = inflight[0]
            if not block:
                err = d.cuEventQuery(evs[3][1])[0]
                if err == self._NOT_READY:
                    return
                if err != self._SUCCESS:
                    raise drv.error_from_code("cuEventQuery", err)
            t = tuple(self._check("cuEventElapsedTime", d.cuEventElapsedTime(start_h, e[1])) for e in evs)
            timings.append(BatchTiming(index, t))  # type: ignore[arg-type]
            inflight.popleft()
            self._give_back_events(evs)

    def _abort(self, live, stop, stager, drainer, inflight) -> tuple[int, bool]:
        """Drain in-flight work and give everything back. Returns the number of device
        allocations freed here (the rest were already freed in stream order) and whether
        every stream drained."""
        stop.set()
        drained = True
        # Drain first: with copy_streams a live buffer may still be used on a stream
        # other than the one it is freed on.
        for s in self._all_streams:
            try:
                s.sync()  # after this every host function enqueued on s has run
            except Exception:
                drained = False
        freed = 0
        for ptr, h, _ in live:
            try:
                self.pool.free_ptr(ptr, h)
                freed += 1
            except Exception:  # the context may be broken (sticky CUDA error): nothing more to do
                pass
        live.clear()
        for w in (stager, drainer):
            if w is not None:
                w.join(timeout=10.0)
        while inflight:
            _, evs = inflight.popleft()
            self._give_back_events(evs)
        return freed, drained


@dataclasses.dataclass(frozen=True)
class RunMode:
    """How one run treats its batches."""

    timing: bool  # four timing events per batch: per-stage stats
    synchronous: bool  # wait for each batch before the next
    graphs: bool  # one CUDA graph launch per batch (graphs.py)


PROBE_RUN = RunMode(timing=True, synchronous=True, graphs=False)  # chunk="auto" probes: stage times


class _Run:
    """What one run holds while it goes: its staging threads and signals, the device
    allocations not yet freed in stream order, the timing events in flight, and the
    host's own clock."""

    def __init__(self, batches: list[P.Batch], stop: threading.Event):
        self.batches, self.stop = batches, stop
        self.signals: list[Any] = []  # made for this run: closed at its end
        self.stager: InputStager | None = None
        self.drainer: OutputDrainer | None = None
        self.deferred: DeferredFree | None = None
        self.live: list[tuple[int, Any, Any]] = []  # (device pointer, stream, done event) not yet freed
        self.inflight: collections.deque = collections.deque()  # (batch index, events) not yet read
        self.timings: list[BatchTiming] = []
        self.enqueue_us: list[float] = []
        self.wait_s = 0.0  # the enqueueing thread blocked on the ring (and, synchronous, on the GPU)
        self.off_s = 0.0  # time inside the enqueue window that is not enqueue time: waits, captures

    def acquire_out(self, slot: int) -> None:
        """Wait until the drain thread is done with output slot ``slot``."""
        tw = time.perf_counter()
        self.drainer.acquire_slot(slot)  # type: ignore[union-attr]
        dt = time.perf_counter() - tw
        self.wait_s += dt
        self.off_s += dt

    def stage_events(self, take: Any) -> Any:
        """The protocol's source of timing events: four per batch, read back later."""
        inflight = self.inflight

        def events(index: int) -> list[tuple[Any, Any]]:
            evs = take()
            inflight.append((index, evs))
            return evs

        return events


_ORPHANED_SIGNALS: list[Any] = []


def _annotate(exc: BaseException, b: P.Batch, pos: int, n: int, freed: int, slots: int) -> None:
    where = f"batch {b.index}" + (f" (rows {b.rows[0]}:{b.rows[1]})" if b.rows else "")
    note = (
        f"fullpipe.StreamPipeline: failed at {where}, {pos + 1} of {n} in this run; in-flight work was "
        f"drained, {freed} device allocation(s) still held by the run freed, all {slots} pinned slots "
        "each way returned"
    )
    try:
        exc.add_note(note)
        exc.batch_index = b.index  # type: ignore[attr-defined]
    except Exception:  # some exception types refuse new attributes
        pass
