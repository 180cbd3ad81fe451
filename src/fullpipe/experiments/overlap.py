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

import numpy as np

from ..cuda import driver as drv
from ..cuda.memory import DeviceArray, copy_d2h, copy_h2d, pinned_empty
from ..cuda.pool import DevicePool
from ..cuda.streams import create_stream
from ..pipeline import StreamPipeline
from ..cuda.device import device_info
from ..cuda.timing import gbps, time_streams
from ..pipeline.workload import MixKernel, calibrate_rounds, reference
from ..cuda.timing import median, time_on_stream
from .measure import median_pipeline_run
from .result import Bound, Result
from ..report.claims import with_claims

NAME = "overlap"
TITLE = "Serial vs pipelined H2D -> compute -> D2H on 1-8 streams"
CLAIM = ("2-3x throughput with proper stream overlap; near-linear scaling with the number "
         "of streams up to hardware limits")

CHUNK_BYTES = 8 << 20
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
        with StreamPipeline(kernel, streams=3, chunk=n, pool=pool, device=dev) as pipe:
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
        with StreamPipeline(kernel, streams=3, chunk=n, pool=pool, device=dev) as pipe:
            st = median_pipeline_run(pipe, x, y, repeat)
        rows.append({
            "workload": "balanced, chunk sweep", "mode": "pipeline", "streams": 3, "chunk_MiB": mib,
            "GB/s": gbps(nbytes, st.wall_ms), "wall_ms": st.wall_ms, "bound_ms": bound_ms,
            "ratio": bound_ms / st.wall_ms, "speedup": serial_ms / st.wall_ms,
            "in_run_ratio": st.ratio_to_bound, "overlap": st.overlap, "enqueue_us": st.enqueue_us_per_batch,
        })
    return rows


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

        with StreamPipeline(kernel, streams=3, chunk=n, pool=pool, device=dev) as pipe:
            ok = _check_correct(pipe, x, y, rounds, rng)
        with StreamPipeline(kernel, streams=2, chunk=n, pool=pool, device=dev, copy_streams=True) as pipe:
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
            with StreamPipeline(kernel, streams=ns, chunk=n, pool=pool, device=dev) as pipe:
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
            with StreamPipeline(kernel, streams=ns, chunk=n, pool=pool, device=dev, copy_streams=True) as pipe:
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
        # Host overhead without per-stage events (the four operations + alloc/free only).
        with StreamPipeline(kernel, streams=3, chunk=n, pool=pool, device=dev, timing=False) as pipe:
            st = median_pipeline_run(pipe, x, y, repeat)
        metrics[f"{wname}_enqueue_us_no_events"] = st.enqueue_us_per_batch
        if wname == "balanced":
            # The same with graph=True: each batch is one captured CUDA graph (pinned arrays:
            # two memcpy-node updates and one cuGraphLaunch per batch), checked first.
            with StreamPipeline(kernel, streams=3, chunk=n, pool=pool, device=dev, graph=True) as pipe:
                all_correct &= _check_correct(pipe, x, y, rounds, rng)
                st = median_pipeline_run(pipe, x, y, repeat)
            rows.append({
                "workload": wname, "mode": "pipeline, CUDA graphs", "streams": 3,
                "GB/s": gbps(nbytes, st.wall_ms), "wall_ms": st.wall_ms, "bound_ms": bound_ms,
                "ratio": bound_ms / st.wall_ms, "speedup": serial_ms / st.wall_ms,
                "in_run_ratio": None, "overlap": None, "enqueue_us": st.enqueue_us_per_batch,
            })
            metrics["balanced_graph_enqueue_us"] = st.enqueue_us_per_batch
            metrics["balanced_graph_ratio"] = bound_ms / st.wall_ms
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
    # The claim's row: the best >= 3-stream balanced run, at 8 MiB or from the chunk sweep.
    copy_rows = [r for r in table if r["workload"] == "balanced" and r["mode"] == "pipeline, copy streams"]
    candidates = ([r for r in bal if r["streams"] >= 3] + [r for r in sweep if r["chunk_MiB"] >= 8] + copy_rows)
    best3 = max(candidates, key=lambda r: (min(r["ratio"] / 0.95, r["speedup"] / 2.7), r["ratio"]))
    # The best of ~10 noisy rows is biased upwards: check the chosen configuration once
    # more for correctness and judge the target on a fresh measurement of it.
    kernel.rounds = metrics["balanced_rounds"]
    n_best = (best3["chunk_MiB"] << 20) // 4
    with StreamPipeline(kernel, streams=best3["streams"], chunk=n_best, pool=pool, device=dev,
                        copy_streams=best3["mode"] == "pipeline, copy streams") as pipe:
        all_correct &= _check_correct(pipe, x, y, kernel.rounds, rng)
        fresh = median_pipeline_run(pipe, x, y, repeat)
    metrics["balanced_best_selected_ratio"] = best3["ratio"]
    best3 = dict(best3, ratio=best3["bound_ms"] / fresh.wall_ms,
                 speedup=best3["speedup"] * best3["wall_ms"] / fresh.wall_ms, wall_ms=fresh.wall_ms)
    metrics["balanced_best_chunk_MiB"] = best3["chunk_MiB"]
    metrics["balanced_best_layout"] = (f"{best3['streams']} compute streams + 1 H2D + 1 D2H stream"
                                       if best3["mode"] == "pipeline, copy streams" else f"{best3['streams']} streams")
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
    target_ok = best3["ratio"] >= 0.95 and best3["speedup"] >= 2.7
    scaling_ok = sp[2] >= 1.7 and sp[3] >= 2.5 and sp[8] <= 1.1 * sp[3]
    if not all_correct:
        verdict = "failed"
        notes.append("The pipeline's output did not match the NumPy reference: numbers not trusted.")
    elif target_ok and scaling_ok:
        verdict = "supported"
    elif best3["speedup"] >= 2.0:
        verdict = "partly supported"
    else:
        verdict = "not supported"
    at8 = max((r for r in bal if r["streams"] >= 3), key=lambda r: r["ratio"])
    notes.append(
        f"Balanced, >= 3 streams: best {best3['ratio']:.3f} x bound and {best3['speedup']:.2f}x serial "
        f"({metrics['balanced_best_layout']}, {best3['chunk_MiB']} MiB chunks; targets 0.95 and 2.7); at 8 MiB "
        f"chunks {at8['ratio']:.3f} x bound ({at8['streams']} streams). Chunk sweep, 3 streams: "
        + ", ".join(f"{r['chunk_MiB']} MiB {r['ratio']:.3f}x bound / {r['speedup']:.2f}x serial" for r in sweep)
        + ". Speedup by streams (8 MiB): "
        + ", ".join(f"{k}: {v:.2f}x" for k, v in sp.items())
        + ". Scaling stops at 3 streams: three engines (H2D copy engine, SMs, D2H copy engine) are "
          "the hardware limit for a three-stage batch; more streams only add batches in flight."
    )
    notes.append(f"Enqueue overhead per batch (alloc, H2D, compute launch, D2H, free): "
                 f"{metrics['balanced_enqueue_us_no_events']:.1f} us without per-stage events, "
                 f"{metrics['enqueue_us_per_batch_balanced_3']:.1f} us with them (target <= 20 us)"
                 + (f"; with graph=True (one captured CUDA graph per batch shape and stream) "
                    f"{metrics['balanced_graph_enqueue_us']:.1f} us, {metrics['balanced_graph_ratio']:.3f}x bound "
                    "with 3 streams" if "balanced_graph_enqueue_us" in metrics else "") + ".")
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
    figures = _figure(ctx, figures_data)
    traces = {}
    if (ctx.out_dir / "overlap-timeline.png").is_file():
        figures["timeline: balanced, 3 streams (CUPTI)"] = str(ctx.out_dir / "overlap-timeline.png")
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
        ratio=best3["ratio"], table=table, notes=notes, figures=figures, traces=traces,
    ))


def _figure(ctx, data) -> dict[str, str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        return {}
    fig, ax = plt.subplots(figsize=(7, 4))
    for (wname, (rows, bound_ms)), color in zip(data.items(), ("C0", "C1", "C2")):
        pipe = [r for r in rows if r["mode"] == "pipeline"]
        ax.plot([r["streams"] for r in pipe], [r["GB/s"] for r in pipe], "o-", color=color, label=wname)
        ax.axhline(rows[0]["GB/s"], color=color, ls=":", lw=1)  # serial
        ax.axhline(rows[0]["GB/s"] * rows[0]["wall_ms"] / bound_ms, color=color, ls="--", lw=1)
    ax.set_xlabel("streams")
    ax.set_ylabel("GB/s in (dotted: serial, dashed: bound)")
    ax.set_xscale("log", base=2)
    ax.legend()
    ax.set_title("overlap: pipeline throughput vs streams")
    path = ctx.out_dir / "overlap.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return {"throughput": str(path)}
