"""overlap: serial vs the stream pipeline with 1, 2, 3, 4 and 8 streams, and with copy streams.

The same batches (8 MiB of uint32 each, pinned host memory) go through H2D ->
compute -> D2H. The compute is fullpipe's mix kernel, calibrated in this run to
take as long as one batch's copy (balanced), a quarter of it (copy-bound) or
three times it (compute-bound). "Copy time" is measured with H2D and D2H running
at the same time, as they do inside a pipeline (PCIe carries a little less each
way when both directions are busy).

- serial: one stream, and the host waits for each batch before the next;
- pipeline, N streams: StreamPipeline, nothing waits inside the loop; each batch's
  copies and compute on its own stream;
- pipeline, copy streams: every H2D on one stream, every D2H on another, compute on
  N streams (StreamPipeline(copy_streams=True)): each copy engine works through one
  queue instead of switching between streams;
- the balanced workload on 3 streams at chunk sizes from 2-4 to 16-32 MiB.

Bound, measured in this run for the same batches: max(all H2D and all D2H copies
run together, all compute launches back to back). Ratio = bound / wall. The
pipeline's own stats (per-stage busy time from events) give a second, in-run
bound, reported beside it.
"""

from __future__ import annotations

import ctypes
import time
from typing import Any
from pathlib import Path
import numpy as np

from ..cuda import driver as drv
from ..cuda.hotpath import HotPath, PackedArgs, handle_int
from ..cuda.memory import DeviceArray, copy_d2h, copy_h2d, pinned_empty
from ..cuda.pool import DevicePool
from ..cuda.streams import create_stream
from ..pipeline import StreamPipeline
from ..cuda.device import device_info
from ..cuda.timing import gbps, time_streams
from ..pipeline.run_graphs import capture_forked
from ..pipeline.workload import BLOCK, MixKernel, calibrate_rounds, reference
from ..cuda.timing import median, time_on_stream
from ..errors import CudaError
from .measure import in_turn, median_pipeline_run
from .result import Bound, Result
from .claims import UNJUDGED, Data, Judged, Missing, at_least, at_most, is_num, percent, rule, times, with_claims
from .figures import BOUND, GREY, WIDE, need, pyplot, rows_of, save

NAME = "overlap"
TITLE = "Serial vs pipelined H2D -> compute -> D2H on 1-8 streams"
CLAIM = ("2-3x throughput with proper stream overlap; near-linear scaling with the number "
         "of streams up to hardware limits")
TECHNIQUE = (  # what the technique is, for a reader who has not met it (the report's page)
    "A GPU has separate engines for copying to the device, computing and copying back. Cut the data into "
    "batches and give each batch a stream: batch i+1 uploads while batch i computes and batch i-1 "
    "downloads. With three balanced stages that is up to 3× the throughput of running them one after "
    "another; streams beyond the number of engines only add batches in flight. How the work is spread "
    "over streams matters too: a copy engine that switches between several streams' queues idles a few "
    "microseconds per copy, so one stream for all uploads and one for all downloads (compute on the "
    "others, joined by events) gets closer to the bound."
)
# The claims whose verdicts make this experiment's verdict (claims.summary): its canonical ones.
VERDICT_FROM = ("overlap-throughput", "stream-scaling")
CHUNK_BYTES = 8 << 20
# The balanced rows the overlap-targets claim may take its best configuration from: their mode
# -> the StreamPipeline options beside streams and chunk (graph="batch": any pinned batches,
# not only repeated runs).
BEST_ROW_OPTIONS = {"pipeline": {}, "pipeline, copy streams": {"copy_streams": True},
                    "pipeline, CUDA graph per batch": {"graph": "batch"}}
STREAM_COUNTS = (1, 2, 3, 4, 8)
COPY_STREAM_COUNTS = (1, 2, 3)  # compute streams beside one H2D and one D2H stream
WORKLOADS = {"balanced": 1.0, "copy-bound": 0.25, "compute-bound": 3.0}  # compute / copy time


def _check_correct(pipe, x, y, rounds, rng) -> bool:
    y.fill(0xDEADBEEF)  # poison
    pipe.run(x, out=y)
    idx = rng.choice(x.size, size=min(x.size, 20_000), replace=False)
    head = slice(0, 4096)
    return bool(np.array_equal(y[idx], reference(x[idx], rounds))
                and np.array_equal(y[head], reference(x[head], rounds)))



def _trace_overhead(ctx, kernel, pool, dev, n, x, y, repeat) -> dict:
    """The balanced 3-stream pipeline with and without a CUPTI capture around it,
    interleaved; also keeps one traced run's timeline for the report."""
    from .. import trace

    out: dict = {}
    try:
        with StreamPipeline(kernel, streams=3, chunk=n, pool=pool, device=dev, timing=True) as pipe:
            pipe.run(x, out=y)
            for label, tags in (("trace", True), ("trace_untagged", False)):
                plain, traced = [], []
                for _ in range(max(repeat, 3)):
                    pipe.run(x, out=y)
                    plain.append(pipe.stats.wall_ms)
                    with trace.capture(backend="cupti", tags=tags) as tl:
                        pipe.run(x, out=y)
                    traced.append(pipe.stats.wall_ms)
                out[f"{label}_overhead"] = median(traced) / median(plain) - 1.0
            out["trace_records"] = len(tl.records)
            tdir = ctx.out_dir / "traces"
            tdir.mkdir(parents=True, exist_ok=True)
            tl.save(tdir / "overlap-balanced-3-streams.json")
            tl.plot(ctx.out_dir / "overlap-timeline.png")
            out["trace_summary_at_least_2"] = tl.summary().at_least_2_fraction
            out.update(_copy_gaps(tl.timeline))
    except Exception as exc:  # CUPTI missing or refused: the experiment still stands
        out["trace_overhead_error"] = f"{type(exc).__name__}: {exc}"
    return out


def _copy_gaps(tl) -> dict:
    """Median idle gap (us) between consecutive copies of different streams in one
    direction, in the traced run: time the back-to-back bound does not pay. It holds the
    engine's switch from one stream's queue to the next and any wait of the next copy
    for its own stream's earlier work; copies that overlap (several engines in one
    direction) count as no gap."""
    out = {}
    for engine in ("h2d", "d2h"):
        recs = tl.of_engine(engine)
        gaps = sorted(max(0, b.start_ns - a.end_ns) for a, b in zip(recs, recs[1:]) if b.stream != a.stream)
        if gaps:
            out[f"{engine}_switch_gap_us_median"] = gaps[len(gaps) // 2] / 1e3
            busy = sum(r.duration_ns for r in recs)
            out[f"{engine}_engine_busy_fraction"] = busy / (recs[-1].end_ns - recs[0].start_ns)
    return out


def _all_copies(x, y, n, d_in, d_out, s_in, s_out):
    """Two callables that enqueue every batch's H2D (on s_in) and every batch's D2H (on
    s_out) back to back, for batches of n elements: what the copy bound is timed on."""
    xs = [x[j * n:(j + 1) * n] for j in range(x.size // n)]
    ys = [y[j * n:(j + 1) * n] for j in range(y.size // n)]

    def all_h2d():
        for xi in xs:
            copy_h2d(d_in.ptr, xi, s_in)

    def all_d2h():
        for yi in ys:
            copy_d2h(yi, d_out.ptr, s_out)

    return all_h2d, all_d2h


def _chunk_sweep(ctx, kernel, pool, dev, x, y, s0, s1, da, db, repeat, mib_list, progress) -> list[dict]:
    """The balanced workload (same rounds, so compute per byte stays balanced with
    the copies) on 3 streams at several chunk sizes, each against the bound and the
    serial run measured at that chunk size."""
    rows = []
    nbytes = x.nbytes
    for i, mib in enumerate(mib_list):
        progress(i / len(mib_list), f"balanced, chunk {mib} MiB")
        n = (mib << 20) // 4
        k = x.size // n
        all_h2d, all_d2h = _all_copies(x, y, n, da, db, s0, s1)
        dn = DeviceArray(da.ptr, n, np.uint32), DeviceArray(db.ptr, n, np.uint32)
        both_ms = median(time_streams(dev, s0, [(s0, all_h2d), (s1, all_d2h)], repeat=3))
        compute_ms = median(time_on_stream(lambda: [kernel(s0, dn[0], dn[1]) for _ in range(k)], s0,
                                           warmup=1, repeat=3))
        bound_ms = max(both_ms, compute_ms)
        with StreamPipeline(kernel, streams=1, chunk=n, pool=pool, device=dev, synchronous=True,
                            timing=False) as serial:
            serial_ms = median_pipeline_run(serial, x, y, repeat).wall_ms
        # timing=True throughout: every batch timed, as these runs always were, so the
        # in-run ratio, the overlap and the enqueue cost "with per-stage timing events" are exact
        with StreamPipeline(kernel, streams=3, chunk=n, pool=pool, device=dev, timing=True) as pipe:
            st = median_pipeline_run(pipe, x, y, repeat)
        rows.append({
            "workload": "balanced, chunk sweep", "mode": "pipeline", "streams": 3, "chunk_MiB": mib,
            "GB/s": gbps(nbytes, st.wall_ms), "wall_ms": st.wall_ms, "bound_ms": bound_ms,
            "ratio": bound_ms / st.wall_ms, "speedup": serial_ms / st.wall_ms,
            "in_run_ratio": st.ratio_to_bound, "overlap": st.overlap, "enqueue_us": st.enqueue_us_per_batch,
        })
    return rows


class _BareRun:
    """The driver calls a pipelined run of ``batches`` batches of ``n`` elements makes, with
    no Python around them but the loop (the floors below): each batch's H2D, the kernel's
    launch and its D2H through the same ctypes hot path as the executor, on ``streams`` in
    turn, each stream's batches in one device buffer (a lane: the output 256-byte aligned
    after the input, as the executor lays out a batch)."""

    def __init__(self, kernel: MixKernel, streams: list, x: np.ndarray, y: np.ndarray, n: int, batches: int):
        self.hot = HotPath()
        self.kernel, self.n, self.batches = kernel, n, batches
        self.handles = [handle_int(s) for s in streams]
        self.args = PackedArgs([ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int32])
        self.kh, self.grid = handle_int(kernel.kernel.handle), kernel.grid_for(n)
        self.nb = n * x.itemsize
        self.off = (self.nb + 255) // 256 * 256
        self.lane_bytes = self.off + self.nb
        self.xs, self.ys = x.ctypes.data, y.ctypes.data

    def enqueue(self, lanes: list[int]) -> None:
        """Every batch, on stream ``i % streams`` and its lane buffer ``lanes[i % streams]``."""
        hot, args, handles, kh, grid = self.hot, self.args, self.handles, self.kh, self.grid
        n, nb, off, rounds, xs, ys = self.n, self.nb, self.off, self.kernel.rounds, self.xs, self.ys
        for i in range(self.batches):
            lane = i % len(handles)
            h, p = handles[lane], lanes[lane]
            hot.memcpy_htod(p, xs + i * nb, nb, h)
            args.set(p, p + off, n, rounds)
            hot.launch(kh, grid, BLOCK, args, h)
            hot.memcpy_dtoh(ys + i * nb, p + off, nb, h)


def _driver_floor_us(kernel: MixKernel, pool: DevicePool, streams: list, x: np.ndarray, y: np.ndarray,
                     n: int, batches: int) -> float:
    """Host µs per batch of the driver calls a pipelined run of these batches makes
    (:class:`_BareRun`), issued back to back: this host's floor for the pipeline's enqueue
    cost per batch (the median of three passes). The driver's host cost per call varies
    from host to host by up to 2x (an H2D 4.1 us on one H100 host, 7.1 us on another:
    sessions 24 and 34)."""
    run = _BareRun(kernel, streams, x, y, n, batches)
    hot, pool_h = run.hot, handle_int(pool.handle)
    lanes: list[int] = []
    times = []
    try:
        for h in run.handles:  # (inside the try: a lane taken before a failed one goes back)
            lanes.append(hot.alloc_from_pool(run.lane_bytes, pool_h, h))
        for _ in range(3):
            for s in streams:
                s.sync()
            t0 = time.perf_counter()
            run.enqueue(lanes)
            times.append((time.perf_counter() - t0) * 1e6 / batches)
    finally:
        for p, h in zip(lanes, run.handles):
            hot.free_async(p, h)
        for s in streams:
            s.sync()
    return median(times)


def _graph_floor_us(kernel: MixKernel, pool: DevicePool, streams: list, x: np.ndarray, y: np.ndarray,
                    n: int, batches: int) -> float:
    """Host µs per batch of one cuGraphLaunch of a graph holding the whole run: the same
    batches (:class:`_BareRun`) as a pipeline's whole-run graph (pipeline/run_graphs.py), in
    an equivalent graph captured by hand the way run_graphs.py captures (``capture_forked``),
    launched bare after a sync (the median of five launches after a first, which also
    uploads it). This host's floor for graph=True's cost per batch: the driver's launch
    costs per memcpy node (1.2-2.5 µs on session 36's hosts, p241/p242) and little per
    kernel node. A failed capture raises its error; the cleanup goes on past a step that
    fails."""
    run = _BareRun(kernel, streams, x, y, n, batches)
    hot, h0 = run.hot, run.handles[0]
    lanes: list[int] = []
    events: list = []  # the fork, then each lane's join
    graph = exe = None
    times = []
    try:
        for _ in streams:
            events.append(drv.call("cuEventCreate", 0))
        for _ in streams:  # (on the launch's stream, then synced: ordered before every launch)
            lanes.append(hot.alloc_from_pool(run.lane_bytes, handle_int(pool.handle), h0))
        streams[0].sync()
        graph, failure, end_error = capture_forked([s.handle for s in streams], events[0], events,
                                                   lambda: run.enqueue(lanes))
        if failure is not None or end_error is not None:
            raise failure or end_error  # type: ignore[misc]
        exe = drv.call("cuGraphInstantiate", graph, 0)
        exe_h = handle_int(exe) if hot.native else exe
        for k in range(6):  # (the first launch of a new exec also uploads it: not timed)
            streams[0].sync()
            t0 = time.perf_counter()
            hot.graph_launch(exe_h, h0)
            if k:
                times.append((time.perf_counter() - t0) * 1e6 / batches)
    finally:
        cleanup = [lambda: streams[0].sync()]
        if exe is not None:
            cleanup.append(lambda: drv.call("cuGraphExecDestroy", exe))
        if graph is not None:
            cleanup.append(lambda: drv.call("cuGraphDestroy", graph))
        cleanup += [lambda ev=ev: drv.call("cuEventDestroy", ev) for ev in events]
        cleanup += [lambda p=p: hot.free_async(p, h0) for p in lanes]
        cleanup += [lambda s=s: s.sync() for s in streams]
        left: CudaError | None = None
        for step in cleanup:
            try:
                step()
            except CudaError as exc:  # (the next steps still give back what they can)
                left = left or exc
        if left is not None and len(times) == 5:  # (else an earlier error is on its way)
            raise left
    return median(times)


def run(ctx) -> Result:
    dev = ctx.device
    batches = 96 if ctx.quick else 256
    repeat = 3 if ctx.quick else 5
    n = CHUNK_BYTES // 4
    rng = np.random.default_rng(1234)
    ctx.progress(0.0, "allocating pinned memory")
    x = pinned_empty(batches * n, np.uint32)
    y = pinned_empty(batches * n, np.uint32)
    x[:] = rng.integers(0, 2**32, x.size, dtype=np.uint32)
    pool = DevicePool(dev, release_threshold="max")
    s0, s1 = create_stream(dev), create_stream(dev)
    da = pool.empty(n, np.uint32, s0)
    db = pool.empty(n, np.uint32, s0)
    with drv.translated("cuStreamSynchronize"):
        s0.sync()

    # ---- bounds, measured now: copies alone and both directions at once; compute alone
    ctx.progress(0.02, "measuring copy peaks")
    all_h2d, all_d2h = _all_copies(x, y, n, da, db, s0, s1)
    h2d_ms = median(time_streams(dev, s0, [(s0, all_h2d)], repeat=3))
    d2h_ms = median(time_streams(dev, s0, [(s1, all_d2h)], repeat=3))
    both_ms = median(time_streams(dev, s0, [(s0, all_h2d), (s1, all_d2h)], repeat=3))
    copy_per_batch_ms = both_ms / batches
    kernel = MixKernel(dev)
    nbytes = batches * CHUNK_BYTES

    table, metrics, figures_data = [], {}, {}
    notes = [
        f"{batches} batches of {CHUNK_BYTES >> 20} MiB uint32, pinned host memory; "
        f"H2D alone {gbps(nbytes, h2d_ms):.1f} GB/s, D2H alone {gbps(nbytes, d2h_ms):.1f} GB/s, "
        f"both at once {gbps(nbytes, both_ms):.1f} GB/s each way.",
    ]
    all_correct = True
    step, n_steps = 0, len(WORKLOADS) * (len(STREAM_COUNTS) + 3)
    for wname, factor in WORKLOADS.items():
        ctx.progress(0.05 + 0.85 * step / n_steps, f"{wname}: calibrating compute")
        rounds, _ = calibrate_rounds(kernel, s0, da, db, factor * copy_per_batch_ms)
        compute_ms = median(time_on_stream(lambda: [kernel(s0, da, db) for _ in range(batches)], s0,
                                           warmup=1, repeat=3))
        bound_ms = max(both_ms, compute_ms)
        bound_stage = "copies (both ways at once)" if both_ms >= compute_ms else "compute"

        with StreamPipeline(kernel, streams=3, chunk=n, pool=pool, device=dev, timing=True) as pipe:
            ok = _check_correct(pipe, x, y, rounds, rng)
        with StreamPipeline(kernel, streams=2, chunk=n, pool=pool, device=dev, copy_streams=True,
                            timing=True) as pipe:
            ok &= _check_correct(pipe, x, y, rounds, rng)
        all_correct &= ok
        serial = StreamPipeline(kernel, streams=1, chunk=n, pool=pool, device=dev, synchronous=True, timing=False)
        with serial:
            st = median_pipeline_run(serial, x, y, repeat)
        serial_ms = st.wall_ms
        step += 1
        rows = [{
            "workload": wname, "mode": "serial", "streams": 1, "GB/s": gbps(nbytes, serial_ms),
            "wall_ms": serial_ms, "bound_ms": bound_ms, "ratio": bound_ms / serial_ms, "speedup": 1.0,
            "in_run_ratio": None, "overlap": None, "enqueue_us": st.enqueue_us_per_batch,
        }]
        for ns in STREAM_COUNTS:
            ctx.progress(0.05 + 0.85 * step / n_steps, f"{wname}: {ns} stream(s)")
            with StreamPipeline(kernel, streams=ns, chunk=n, pool=pool, device=dev, timing=True) as pipe:
                st = median_pipeline_run(pipe, x, y, repeat)
            rows.append({
                "workload": wname, "mode": "pipeline", "streams": ns, "GB/s": gbps(nbytes, st.wall_ms),
                "wall_ms": st.wall_ms, "bound_ms": bound_ms, "ratio": bound_ms / st.wall_ms,
                "speedup": serial_ms / st.wall_ms, "in_run_ratio": st.ratio_to_bound,
                "overlap": st.overlap, "enqueue_us": st.enqueue_us_per_batch,
            })
            step += 1
        # The same, with every H2D on one stream and every D2H on another (copy_streams):
        # the copy engines see one queue each instead of switching between streams.
        for ns in COPY_STREAM_COUNTS:
            ctx.progress(0.05 + 0.85 * step / n_steps, f"{wname}: copy streams + {ns} compute")
            with StreamPipeline(kernel, streams=ns, chunk=n, pool=pool, device=dev, copy_streams=True,
                                timing=True) as pipe:
                st = median_pipeline_run(pipe, x, y, repeat)
            rows.append({
                "workload": wname, "mode": "pipeline, copy streams", "streams": ns,
                "GB/s": gbps(nbytes, st.wall_ms), "wall_ms": st.wall_ms, "bound_ms": bound_ms,
                "ratio": bound_ms / st.wall_ms, "speedup": serial_ms / st.wall_ms,
                "in_run_ratio": st.ratio_to_bound, "overlap": st.overlap, "enqueue_us": st.enqueue_us_per_batch,
            })
        step += 1
        if wname == "balanced":
            metrics.update(_trace_overhead(ctx, kernel, pool, dev, n, x, y, repeat))
        # Host overhead without per-stage events (the four operations + alloc/free only),
        # and the same driver calls bare: this host's floor for it
        with StreamPipeline(kernel, streams=3, chunk=n, pool=pool, device=dev, timing=False) as pipe:
            st = median_pipeline_run(pipe, x, y, repeat)
        metrics[f"{wname}_enqueue_us_no_events"] = st.enqueue_us_per_batch
        if wname == "balanced":
            floor_streams = [s0, s1, create_stream(dev)]
            metrics["balanced_enqueue_floor_us"] = _driver_floor_us(kernel, pool, floor_streams, x, y, n, batches)
            try:  # (a failure here leaves the floor out, not the experiment)
                metrics["balanced_run_graph_floor_us"] = _graph_floor_us(kernel, pool, floor_streams, x, y, n,
                                                                         batches)
            except CudaError as exc:
                notes.append(f"The graph floor was not measured: {exc}")
            # The same with CUDA graphs, each checked first. graph="batch": each batch is one
            # captured graph (pinned arrays: two memcpy-node updates and one cuGraphLaunch
            # per batch). graph=True: these runs repeat one another (same arrays), so from
            # the third on the whole run is one graph launch (run_graphs.py).
            for graph, mode, prefix in (("batch", "pipeline, CUDA graph per batch", "balanced_graph"),
                                        (True, "pipeline, one CUDA graph per run", "balanced_run_graph")):
                with StreamPipeline(kernel, streams=3, chunk=n, pool=pool, device=dev, graph=graph) as pipe:
                    all_correct &= _check_correct(pipe, x, y, rounds, rng)
                    st = median_pipeline_run(pipe, x, y, repeat)
                    all_correct &= _check_correct(pipe, x, y, rounds, rng)  # (a replay when graph=True)
                rows.append({
                    "workload": wname, "mode": mode, "streams": 3,
                    "GB/s": gbps(nbytes, st.wall_ms), "wall_ms": st.wall_ms, "bound_ms": bound_ms,
                    "ratio": bound_ms / st.wall_ms, "speedup": serial_ms / st.wall_ms,
                    "in_run_ratio": None, "overlap": None, "enqueue_us": st.enqueue_us_per_batch,
                })
                metrics[f"{prefix}_enqueue_us"] = st.enqueue_us_per_batch
                metrics[f"{prefix}_loop_us"] = st.loop_us_per_batch
                metrics[f"{prefix}_ratio"] = bound_ms / st.wall_ms
                metrics[f"{prefix}_how"] = st.graph.get("run_graph", "none")
        step += 1
        table += rows
        figures_data[wname] = (rows, bound_ms)
        metrics[f"{wname}_rounds"] = rounds
        metrics[f"{wname}_compute_ms_per_batch"] = compute_ms / batches
        metrics[f"{wname}_bound_stage"] = bound_stage
        notes.append(f"{wname}: compute {compute_ms / batches:.3f} ms per batch ({rounds} rounds), "
                     f"copy both ways {copy_per_batch_ms:.3f} ms per batch; bound = {bound_stage}.")

    # ---- chunk size sweep, balanced, 3 streams (bigger chunks: fewer copy-engine switches)
    sweep_mib = (2, 4, 8, 16) if ctx.quick else (4, 8, 16, 32)
    kernel.rounds = metrics["balanced_rounds"]
    big_n = (max(sweep_mib) << 20) // 4
    da2, db2 = pool.empty(big_n, np.uint32, s0), pool.empty(big_n, np.uint32, s0)
    s0.sync()
    sweep = _chunk_sweep(ctx, kernel, pool, dev, x, y, s0, s1, da2, db2, repeat, sweep_mib,
                         lambda f, what: ctx.progress(0.9 + 0.09 * f, what))
    pool.free_array(da2, s0)
    pool.free_array(db2, s0)
    for r in table:
        r["chunk_MiB"] = CHUNK_BYTES >> 20
    table += sweep

    bal = [r for r in table if r["workload"] == "balanced" and r["mode"] == "pipeline"]
    sp = {r["streams"]: r["speedup"] for r in bal}
    # The claim's row: the best >= 3-stream balanced layout, eager (at 8 MiB, from the chunk
    # sweep, or with copy streams) or one CUDA graph per batch.
    copy_rows = [r for r in table if r["workload"] == "balanced" and r["mode"] == "pipeline, copy streams"]
    graph_rows = [r for r in table if r["workload"] == "balanced" and r["mode"] == "pipeline, CUDA graph per batch"]

    def merit(r: dict) -> tuple:
        return min(r["ratio"] / 0.95, r["speedup"] / 2.7), r["ratio"]

    best_eager = max([r for r in bal if r["streams"] >= 3] + [r for r in sweep if r["chunk_MiB"] >= 8] + copy_rows,
                     key=merit)
    best_graph = max(graph_rows, key=merit) if graph_rows else None
    # The best of ~10 noisy rows is biased upwards, and the eager rows time every batch (exact
    # in-run ratios and overlap), which costs the GPU a few µs per timed batch: 0.87x the bound
    # against 0.91x sampled and 0.93x untimed on one H200 (session 36, p243); a graph has no
    # per-batch timing. So the best eager layout and the best graph layout run again, fresh,
    # with the pipeline's default timing ("sampled": a user's pipeline), checked for
    # correctness, in alternating rounds with the eager layout's timing=True twin (for that
    # cost); the better of the two fresh ones is judged (a best of two: the notes print both).
    kernel.rounds = metrics["balanced_rounds"]

    def pipeline_for(r: dict, **extra: Any) -> StreamPipeline:
        return StreamPipeline(kernel, streams=r["streams"], chunk=(r["chunk_MiB"] << 20) // 4, pool=pool,
                              device=dev, **BEST_ROW_OPTIONS.get(r["mode"], {}), **extra)

    rows_of_way = {"eager": best_eager, "timed": best_eager, "graph": best_graph}
    ways: dict[str, StreamPipeline] = {}
    try:
        ways["eager"] = pipeline_for(best_eager)
        ways["timed"] = pipeline_for(best_eager, timing=True)
        if best_graph is not None:
            ways["graph"] = pipeline_for(best_graph)
        for name in ("eager", "graph"):
            if name in ways:
                all_correct &= _check_correct(ways[name], x, y, kernel.rounds, rng)
        walls: dict[str, list[float]] = {name: [] for name in ways}
        for p in ways.values():
            p.run(x, out=y)  # (warm-up)
        for r in range(max(repeat, 4)):
            for name in in_turn(list(ways), r):
                ways[name].run(x, out=y)
                walls[name].append(ways[name].stats.wall_ms)
    finally:
        for p in ways.values():
            p.close()
    fresh = {name: dict(rows_of_way[name], ratio=rows_of_way[name]["bound_ms"] / median(w),
                        speedup=rows_of_way[name]["speedup"] * rows_of_way[name]["wall_ms"] / median(w),
                        wall_ms=median(w)) for name, w in walls.items()}
    metrics["balanced_best_selected_ratio"] = max(best_eager["ratio"], best_graph["ratio"] if best_graph else 0.0)
    metrics["balanced_best_eager_fresh_ratio"] = fresh["eager"]["ratio"]
    metrics["balanced_best_every_batch_timed_ratio"] = fresh["timed"]["ratio"]
    if "graph" in fresh:
        metrics["balanced_best_graph_fresh_ratio"] = fresh["graph"]["ratio"]
    judged = max((n for n in ("eager", "graph") if n in fresh), key=lambda n: merit(fresh[n]))
    best3 = fresh[judged]
    metrics["balanced_best_chunk_MiB"] = best3["chunk_MiB"]
    metrics["balanced_best_layout"] = (f"{best3['streams']} compute streams + 1 H2D + 1 D2H stream"
                                       if best3["mode"] == "pipeline, copy streams" else f"{best3['streams']} streams"
                                       + (", one CUDA graph per batch" if judged == "graph" else ""))
    if copy_rows:
        cbest = max(copy_rows, key=lambda r: r["ratio"])
        metrics["balanced_copy_streams_best_ratio"] = cbest["ratio"]
        metrics["balanced_copy_streams_enqueue_us"] = cbest["enqueue_us"]
    metrics["chunk_sweep"] = {str(r["chunk_MiB"]): {"ratio": r["ratio"], "speedup": r["speedup"]} for r in sweep}
    metrics.update(
        copy_h2d_gbps=gbps(nbytes, h2d_ms), copy_d2h_gbps=gbps(nbytes, d2h_ms),
        copy_both_gbps_each_way=gbps(nbytes, both_ms), balanced_best_speedup_3plus=best3["speedup"],
        balanced_best_ratio_3plus=best3["ratio"], balanced_speedup_by_streams=sp,
        enqueue_us_per_batch_balanced_3=next(r["enqueue_us"] for r in bal if r["streams"] == 3),
        correct=all_correct,
    )
    verdict = UNJUDGED  # the canonical claims' verdict, judged by the rules below
    if not all_correct:
        verdict = "failed"
        notes.append("The pipeline's output did not match the NumPy reference: numbers not trusted.")
    at8 = max((r for r in bal if r["streams"] >= 3), key=lambda r: r["ratio"])
    notes.append(
        f"Balanced, >= 3 streams: best {best3['ratio']:.3f} x bound and {best3['speedup']:.2f}x serial "
        f"({metrics['balanced_best_layout']}, {best3['chunk_MiB']} MiB chunks, the pipeline's default timing; "
        f"targets 0.95 and 2.7)"
        + f"; fresh runs in alternation: the best eager layout {metrics['balanced_best_eager_fresh_ratio']:.3f} x "
          f"bound, {metrics['balanced_best_every_batch_timed_ratio']:.3f} x with every batch timed (timing=True, "
          "as in the eager rows of the table: its events cost the GPU a few us per timed batch)"
        + (f", the best one-graph-per-batch layout {metrics['balanced_best_graph_fresh_ratio']:.3f} x"
           if "balanced_best_graph_fresh_ratio" in metrics else "")
        + f"; at 8 MiB chunks {at8['ratio']:.3f} x bound ({at8['streams']} streams). Chunk sweep, 3 streams: "
        + ", ".join(f"{r['chunk_MiB']} MiB {r['ratio']:.3f}x bound / {r['speedup']:.2f}x serial" for r in sweep)
        + ". Speedup by streams (8 MiB): "
        + ", ".join(f"{k}: {v:.2f}x" for k, v in sp.items())
        + ". Scaling stops at 3 streams: three engines (H2D copy engine, SMs, D2H copy engine) are "
          "the hardware limit for a three-stage batch; more streams only add batches in flight."
    )
    notes.append(f"Enqueue overhead per batch (alloc, H2D, compute launch, D2H, free): "
                 f"{metrics['balanced_enqueue_us_no_events']:.1f} us without per-stage events, "
                 f"{metrics['enqueue_us_per_batch_balanced_3']:.1f} us with them (target <= 20 us); its H2D, launch "
                 f"and D2H alone, back to back: {metrics['balanced_enqueue_floor_us']:.1f} us (this host's floor)"
                 + (f"; with one captured CUDA graph per batch (graph='batch') "
                    f"{metrics['balanced_graph_enqueue_us']:.1f} us, {metrics['balanced_graph_ratio']:.3f}x bound "
                    "with 3 streams" if "balanced_graph_enqueue_us" in metrics else "")
                 + (f"; with graph=True on runs that repeat the same arrays, the whole run as one graph "
                    f"({metrics['balanced_run_graph_how']}): {metrics['balanced_run_graph_enqueue_us']:.2f} us "
                    f"(whole loop {metrics['balanced_run_graph_loop_us']:.2f} us), "
                    f"{metrics['balanced_run_graph_ratio']:.3f}x bound (target <= 5 us with graphs)"
                    + (f"; one bare launch of an equivalent graph of the same batches, captured by hand: "
                       f"{metrics['balanced_run_graph_floor_us']:.2f} us per batch (this host's floor for graphs)"
                       if "balanced_run_graph_floor_us" in metrics else "")
                    if "balanced_run_graph_enqueue_us" in metrics else "") + ".")
    if copy_rows:
        notes.append("Copy streams (every H2D on one stream, every D2H on another, compute on N streams, "
                     "joined by events), balanced: " + ", ".join(
                         f"N={r['streams']}: {r['ratio']:.3f}x bound, {r['speedup']:.2f}x serial, "
                         f"{r['enqueue_us']:.1f} us enqueue" for r in copy_rows)
                     + ". The price: two event records and two stream waits more per batch on the host.")
    if "d2h_switch_gap_us_median" in metrics and "h2d_switch_gap_us_median" in metrics:
        notes.append(
            f"Why not 1.0x at 8 MiB: in the CUPTI trace each copy engine idles a median "
            f"{metrics['h2d_switch_gap_us_median']:.1f} us (H2D) / {metrics['d2h_switch_gap_us_median']:.1f} us "
            "(D2H) between copies of different streams (engine switch plus any wait for the stream's own "
            "earlier work: with 3 streams a stream's next H2D waits for its previous D2H), which the "
            "back-to-back bound does not pay. Bigger chunks pay it less often; one stream per copy "
            "direction (copy streams) avoids the switch.")
    if "trace_overhead" in metrics:
        notes.append(f"Tracing this balanced 3-stream run with CUPTI costs {100 * metrics['trace_overhead']:.1f} % "
                     f"of its time with batch tags, {100 * metrics['trace_untagged_overhead']:.1f} % without "
                     "(target <= 5 %).")
    elif "trace_overhead_error" in metrics:
        notes.append(f"No CUPTI trace: {metrics['trace_overhead_error']}")
    timeline, traces = {}, {}
    if (ctx.out_dir / "overlap-timeline.png").is_file():
        timeline["timeline: balanced, 3 streams (CUPTI)"] = str(ctx.out_dir / "overlap-timeline.png")
        traces["balanced, 3 streams"] = "traces/overlap-balanced-3-streams.json"
    pool.free_array(da, s0)
    pool.free_array(db, s0)
    s0.sync()
    return with_claims(Result(
        experiment=NAME, claim=CLAIM, verdict=verdict, device=device_info(dev),
        params={"batches": batches, "chunk_bytes": CHUNK_BYTES, "streams": list(STREAM_COUNTS),
                "repeat": repeat, "workloads": WORKLOADS, "host_memory": "pinned"},
        metrics=metrics,
        bound=Bound("max(copies both ways at once, compute) for the same batches, balanced",
                    figures_data["balanced"][1], "ms"),
        ratio=best3["ratio"], table=table, notes=notes, figures=timeline, traces=traces,
    ), VERDICT_FROM)


# --------------------------------------------------------------------------- verdicts
def _overlap(d: Data, workload: str = "balanced"):
    serial = d.row(workload=workload, mode="serial")
    pipe = sorted(d.rows(workload=workload, mode="pipeline"), key=lambda x: x.get("streams", 0))
    if not pipe:
        raise Missing(f"table rows workload={workload!r}, mode='pipeline'")
    perfect = d.num(serial, "wall_ms") / d.num(serial, "bound_ms")
    return serial, pipe, perfect


@rule(NAME, "overlap-throughput")
def _overlap_throughput(d: Data) -> Judged:
    serial, pipe, perfect = _overlap(d)
    # The stream counts at the main chunk size (8 MiB). The chunk sweep is reported
    # beside it, not picked from: its speedups are against serial runs at the same
    # chunk size, and small chunks make serial slower (one sync per batch), not the
    # pipeline better.
    best = max(pipe, key=lambda x: d.num(x, "speedup"))
    sp = d.num(best, "speedup")
    sweep = [x for x in d.rows(workload="balanced, chunk sweep") if is_num(x.get("speedup"))]
    chunk = f", {best['chunk_MiB']} MiB chunks" if best.get("chunk_MiB") else ""
    if sweep:
        chunk += ("; chunk sweep (3 streams) " + ", ".join(f"{x['chunk_MiB']} MiB {times(x['speedup'])}" for x in sweep))
    others = []
    for w in ("copy-bound", "compute-bound"):
        rows = d.rows(workload=w, mode="pipeline")
        if rows:
            others.append(f"{w} {times(max(d.num(x, 'speedup') for x in rows))}")
    return Judged(
        measured=(f"{times(sp)} serial throughput ({d.num(best, 'GB/s'):.1f} GB/s), balanced workload, "
                  f"{best['streams']} streams{chunk}" + (f"; {', '.join(others)}" if others else "")),
        bound=(f"perfect overlap = serial time / slowest stage = {times(perfect)} "
               f"(slowest stage {d.num(best, 'bound_ms'):.1f} ms, measured alone)"),
        ratio=sp / perfect, verdict=at_least(sp, 2.0, 1.5),
        target="supported ≥ 2× serial, partly ≥ 1.5×")


def _scaling(d: Data):
    """Speedup by streams (balanced, 8 MiB), the engine limit, the stream counts up to
    it that have a row, and perfect overlap."""
    serial, pipe, perfect = _overlap(d)
    engines = d.dev("copy_engines", 2) or 2
    limit = 3 if engines >= 2 else 2  # H2D engine, SMs, D2H engine (one copy engine: 2 stages)
    sp = {int(x["streams"]): d.num(x, "speedup") for x in pipe}
    upto = [n for n in sp if 2 <= n <= limit] or [n for n in sp if n >= 2]
    if not upto:
        raise Missing("pipeline rows with 2 or more streams")
    return sp, limit, upto, perfect


@rule(NAME, "stream-scaling")
def _overlap_scaling(d: Data) -> Judged:
    sp, limit, upto, perfect = _scaling(d)
    ideal = {n: min(n, limit, perfect) for n in sp}
    eff = min(sp[n] / ideal[n] for n in upto)
    top = max(upto)
    beyond = [n for n in sp if n > top]
    keep = min((sp[n] / sp[top] for n in beyond), default=1.0)
    verdict = "supported" if (eff >= 0.85 and keep >= 0.9) else "partly supported" if eff >= 0.7 else "not supported"
    return Judged(
        measured="speedup by streams " + ", ".join(f"{n}: {times(s)}" for n, s in sorted(sp.items()))
                 + f" (balanced); worst ≤ {top} streams: {eff:.2f} of linear"
                 + (f"; beyond {top}: {keep:.2f} of the {top}-stream speedup" if beyond else ""),
        bound=(f"linear up to {limit} streams ({limit} engines: H2D copy engine, SMs, D2H copy engine), "
               f"capped at perfect overlap {times(perfect)}; flat beyond"),
        ratio=eff, verdict=verdict,
        target=f"supported: every N ≤ {limit} within 15 % of linear and no drop > 10 % beyond; partly: within 30 %")


@rule(NAME, "stream-limit",
      "scaling stops at the engine count: streams beyond it add ≤ 10 % throughput (balanced)")
def _overlap_limit(d: Data) -> Judged:
    sp, limit, upto, _ = _scaling(d)
    top = max(upto)
    beyond = [n for n in sp if n > top]
    if not beyond:
        raise Missing(f"a pipeline row with more than {top} streams")
    gain = max(sp[n] / sp[top] for n in beyond)
    return Judged(measured=", ".join(f"{n} streams {times(sp[n] / sp[top])}" for n in sorted(beyond))
                  + f" the {top}-stream speedup ({times(sp[top])} serial)",
                  bound=f"{top} streams = {times(sp[top])} serial ({limit} engines: H2D copy engine, SMs, D2H copy "
                        "engine)", ratio=gain, verdict="supported" if gain <= 1.1 else "not supported",
                  target=f"supported: every N > {top} at most 1.1× the {top}-stream speedup")


@rule(NAME, "overlap-targets",
      "fullpipe's pipeline reaches ≥ 0.95× the bound and ≥ 2.7× serial (balanced, ≥ 3 streams)")
def _overlap_targets(d: Data) -> Judged:
    ratio = float(d.m("balanced_best_ratio_3plus"))
    sp = float(d.m("balanced_best_speedup_3plus"))
    bound_ms = d.num(d.row(workload="balanced", mode="serial"), "bound_ms")
    chunk = d.m_or(None, "balanced_best_chunk_MiB")
    verdict = ("supported" if ratio >= 0.95 and sp >= 2.7 else "partly supported" if sp >= 2.0
               else "not supported")
    layout = d.m_or(None, "balanced_best_layout")
    where = ", ".join(str(p) for p in (layout, f"{chunk} MiB chunks" if chunk else None) if p)
    eager, graph = d.m_or(None, "balanced_best_eager_fresh_ratio"), d.m_or(None, "balanced_best_graph_fresh_ratio")
    timed = d.m_or(None, "balanced_best_every_batch_timed_ratio")
    fresh = [f"best eager layout {float(eager):.3f}×" if is_num(eager) else None,
             f"{float(timed):.3f}× with every batch timed (timing=True)" if is_num(timed) else None,
             f"best one-graph-per-batch layout {float(graph):.3f}×" if is_num(graph) else None]
    fresh_text = "; ".join(f for f in fresh if f)
    return Judged(measured=f"{ratio:.3f}× bound, {times(sp)} serial" + (f" (best: {where})" if where else "")
                  + (f"; fresh runs, default timing: {fresh_text}" if fresh_text else ""),
                  bound=f"max(copies both ways at once, compute) = {bound_ms:.1f} ms", ratio=ratio,
                  verdict=verdict, target="supported: ≥ 0.95× bound and ≥ 2.7×; partly: ≥ 2×")


@rule(NAME, "enqueue-overhead", "the pipeline enqueues a batch in ≤ 20 µs of host time")
def _overlap_enqueue(d: Data) -> Judged:
    plain = float(d.m("balanced_enqueue_us_no_events"))
    with_events = d.m_or(None, "enqueue_us_per_batch_balanced_3")
    floor = d.m_or(None, "balanced_enqueue_floor_us")
    return Judged(
        measured=f"{plain:.1f} µs per batch (alloc, H2D, launch, D2H, free)"
                 + (f"; {with_events:.1f} µs with per-stage timing events" if with_events else "")
                 + (f"; its H2D, launch and D2H alone, back to back, {float(floor):.1f} µs on this host "
                    f"({plain / float(floor):.2f}× that floor)" if is_num(floor) and float(floor) > 0 else ""),
        bound="target 20 µs per batch", ratio=plain / 20.0, verdict=at_most(plain, 20.0, 30.0),
        target="supported ≤ 20 µs, partly ≤ 30 µs")


@rule(NAME, "graph-enqueue-overhead", "with CUDA graphs the pipeline costs the host ≤ 5 µs per batch")
def _overlap_graph_enqueue(d: Data) -> Judged:
    run_us = d.m_or(None, "balanced_run_graph_enqueue_us")
    per_batch = d.m_or(None, "balanced_graph_enqueue_us")
    if run_us is None:
        return Judged(measured="not measured: this result was recorded before whole-run graphs existed"
                      + (f"; one graph per batch: {per_batch:.1f} µs" if per_batch is not None else ""),
                      bound="", ratio=None, verdict="skipped", target="")
    run_us = float(run_us)
    how = d.m_or("?", "balanced_run_graph_how")
    floor = d.m_or(None, "balanced_run_graph_floor_us")
    return Judged(
        measured=f"{run_us:.2f} µs per batch, runs that repeat the same arrays as one graph ({how})"
                 + (f"; one graph per batch {float(per_batch):.1f} µs" if per_batch is not None else "")
                 + (f"; the driver's bare launch of an equivalent graph of the same batches, {float(floor):.2f} µs "
                    f"per batch on this host ({run_us / float(floor):.2f}× that floor)"
                    if is_num(floor) and float(floor) > 0 else ""),
        bound="target 5 µs per batch", ratio=run_us / 5.0, verdict=at_most(run_us, 5.0, 10.0),
        target="supported ≤ 5 µs, partly ≤ 10 µs (repeated runs)")


@rule(NAME, "trace-overhead", "a CUPTI timeline costs ≤ 5 % of the traced pipeline's time")
def _overlap_trace(d: Data) -> Judged:
    err = d.m_or(None, "trace_overhead_error")
    if err:
        return Judged(measured=f"no trace: {err}", bound="", ratio=None, verdict="skipped", target="")
    ov = float(d.m("trace_overhead"))
    untagged = d.m_or(None, "trace_untagged_overhead")
    return Judged(measured=f"{percent(ov)} with batch tags" + (f", {percent(untagged)} without" if untagged else ""),
                  bound="target 5 % of the untraced run", ratio=ov / 0.05, verdict=at_most(ov, 0.05, 0.10),
                  target="supported ≤ 5 %, partly ≤ 10 %")


# --------------------------------------------------------------------------- figure
def figures(r: dict, out: Path) -> dict[str, Path]:
    """The page's figure, drawn from the result's JSON into the folder ``out``."""
    plt = pyplot()
    workloads = [w for w in dict.fromkeys(x["workload"] for x in r.get("table") or [])
                 if rows_of(r, workload=w, mode="serial")]
    need(workloads, "table rows workload/mode='serial'")
    engines = (r.get("device") or {}).get("copy_engines") or 2
    limit = 3 if engines >= 2 else 2
    fig, (a1, a2) = plt.subplots(1, 2, figsize=WIDE)
    all_n = set()
    bounds: list[tuple[float, list[str]]] = []
    for i, w in enumerate(workloads):
        c = f"C{i}"
        serial = rows_of(r, workload=w, mode="serial")[0]
        pipe = sorted(rows_of(r, workload=w, mode="pipeline"), key=lambda x: x["streams"])
        ns = [x["streams"] for x in pipe]
        all_n |= set(ns)
        bound_gbps = serial["GB/s"] * serial["wall_ms"] / serial["bound_ms"]
        a1.plot(ns, [x["GB/s"] for x in pipe], "o-", color=c, label=f"{w}: pipeline")
        cs = sorted(rows_of(r, workload=w, mode="pipeline, copy streams"), key=lambda x: x["streams"])
        if cs:  # N compute streams + one H2D and one D2H stream
            a1.plot([x["streams"] for x in cs], [x["GB/s"] for x in cs], "^:", color=c,
                    label=f"{w}: + H2D and D2H copy streams")
            all_n |= {x["streams"] for x in cs}
        a1.axhline(bound_gbps, color=c, ls="--", lw=1.2)
        same = next((b for b in bounds if abs(b[0] - bound_gbps) <= 0.01 * b[0]), None)
        if same:
            same[1].append(w)
        else:
            bounds.append((bound_gbps, [w]))
        a1.plot([1], [serial["GB/s"]], marker="s", ms=8, mfc="none", mec=c, ls="none")
        a2.plot(ns, [x["speedup"] for x in pipe], "o-", color=c, label=w)
        if i == 0:
            perfect = serial["wall_ms"] / serial["bound_ms"]
            xs = sorted(all_n | {1})
            a2.plot(xs, [min(n, limit, perfect) for n in xs], ls="--", color=BOUND, lw=1.2,
                    label=f"{w}: linear to {limit} engines, capped at perfect overlap ({perfect:.2f}×)")
    from matplotlib.lines import Line2D

    handles, labels = a1.get_legend_handles_labels()
    handles += [Line2D([], [], color=BOUND, ls="--", lw=1.2),
                Line2D([], [], marker="s", mfc="none", mec=BOUND, ls="none")]
    labels += ["bound: slowest stage alone (same colour)", "serial (host waits per batch)"]
    for ax in (a1, a2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(all_n), [str(n) for n in sorted(all_n)])
        ax.set_xlabel("streams")
        ax.grid(alpha=0.3)
    for value, ws in bounds:
        a1.annotate(f"bound {', '.join(ws)}: {value:.1f} GB/s", (1.0, value), xycoords=("axes fraction", "data"),
                    xytext=(-2, 2), textcoords="offset points", ha="right", va="bottom", fontsize=8)
    a1.set_ylabel("throughput (GB/s of input)")
    a1.set_ylim(0, max(b[0] for b in bounds) * 1.12)
    a1.set_title("pipeline throughput vs streams, against the bound")
    a1.legend(handles, labels, loc="center right", bbox_to_anchor=(1.0, 0.52), fontsize=8)
    a2.set_ylabel("speedup over serial (×)")
    a2.set_ylim(bottom=0)
    a2.set_title("scaling with streams")
    a2.legend(loc="lower right")
    drawn = {"throughput vs streams (dashed: bound measured in this run)": save(fig, out / f"{NAME}.png")}
    sweep = sorted((x for x in rows_of(r, workload="balanced, chunk sweep")
                    if is_num(x.get("chunk_MiB")) and is_num(x.get("ratio"))), key=lambda x: x["chunk_MiB"])
    if sweep:
        drawn["balanced workload on 3 streams: throughput against the bound by chunk size"] = \
            save(_chunk_sweep_figure(sweep), out / f"{NAME}-1.png")
    return drawn


def _chunk_sweep_figure(sweep: list[dict]):
    plt = pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.6))
    mib = [x["chunk_MiB"] for x in sweep]
    a1.plot(mib, [x["GB/s"] for x in sweep], "o-", color="C0", label="pipeline, 3 streams")
    a1.plot(mib, [x["GB/s"] / x["ratio"] for x in sweep], ls="--", color=BOUND, lw=1.2,
            label="bound: slowest stage alone, same chunks")
    a2.plot(mib, [x["ratio"] for x in sweep], "o-", color="C0", label="throughput / bound")
    a2.axhline(1.0, color=BOUND, ls="--", lw=1.2, label="bound")
    a2.axhline(0.95, color=GREY, ls=":", lw=1, label="0.95 (fullpipe's target)")
    for ax in (a1, a2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(mib, [f"{m:g}" for m in mib])
        ax.set_xlabel("chunk (batch) size, MiB")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    a1.set_ylabel("GB/s of input")
    a1.set_ylim(bottom=0)
    a1.set_title("throughput vs chunk size")
    a2.set_ylabel("throughput / bound")
    a2.set_ylim(min(0.8, min(x["ratio"] for x in sweep) - 0.05), 1.05)
    a2.set_title("fraction of the bound by chunk size")
    return fig
