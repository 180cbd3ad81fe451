"""CPU tests of the pipeline's host logic: input checks, batch planning, chunk tuning,
stats arithmetic, the staging helpers, and the workload's NumPy reference."""

from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np
import pytest

from fullpipe.pipeline import StreamPipeline, plan, stats, tuning
from fullpipe.pipeline.pageable import HostCopier, split_ranges
from fullpipe.pipeline.staging import HostFnSignal, Stopped, native_host_functions_available
from fullpipe.pipeline.workload import reference

MiB = 1 << 20


# --------------------------------------------------------------------------- constructor checks
@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"streams": 0}, ValueError, "streams must be >= 1"),
        ({"streams": -2}, ValueError, "streams must be >= 1"),
        ({"streams": 2.0}, TypeError, "streams must be an int"),
        ({"chunk": 0}, ValueError, "chunk must be >= 1"),
        ({"chunk": -5}, ValueError, "chunk must be >= 1"),
        ({"chunk": "0MiB"}, ValueError, "chunk must be > 0"),
        ({"chunk": "lots"}, ValueError, "chunk must be 'auto'"),
        ({"chunk": True}, TypeError, "chunk must be"),
        ({"slots": 0}, ValueError, "slots must be >= 1"),
        ({"recycle": "poll"}, ValueError, "recycle must be one of"),
        ({"staging": "maybe"}, ValueError, "staging must be one of"),
        ({"output": "different"}, ValueError, "output must be"),
        ({"output": ((3,), object)}, ValueError, "cannot go to the GPU"),
        ({"compute": 42}, TypeError, "compute must be callable"),
    ],
)
def test_bad_options_are_rejected_before_any_gpu_work(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        StreamPipeline(**kwargs)


def test_compute_none_needs_same_output():
    with pytest.raises(ValueError, match="compute=None"):
        StreamPipeline(compute=None, output=((4,), np.float32))


@pytest.mark.parametrize(
    "x, match",
    [
        (np.zeros((4, 0), np.float32), "empty"),
        (np.float32(3.0), "scalar"),
        (np.zeros((8, 8), np.float32)[:, ::2], "not C-contiguous"),
        (np.array([object()] * 3), "cannot go to the GPU"),
    ],
)
def test_bad_input_is_a_value_error_without_a_gpu(x, match):
    pipe = StreamPipeline(compute=lambda s, a, b: None, chunk=4)
    with pytest.raises(ValueError, match=match):
        pipe.run(x)
    assert not pipe._started  # nothing was created on the GPU


@pytest.mark.parametrize(
    "out, match",
    [
        (np.zeros((10, 3), np.float64), "dtype"),
        (np.zeros((9, 3), np.float32), "shape"),
        (np.zeros((3, 10), np.float32).T, "C-contiguous"),
    ],
)
def test_wrong_output_is_a_value_error_without_a_gpu(out, match):
    pipe = StreamPipeline(compute=lambda s, a, b: None, chunk=4)
    with pytest.raises(ValueError, match=match):
        pipe.run(np.ones((10, 3), np.float32), out=out)
    assert not pipe._started


def test_read_only_output_is_rejected():
    out = np.zeros((10, 3), np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        StreamPipeline(compute=lambda s, a, b: None, chunk=4).run(np.ones((10, 3), np.float32), out=out)


def test_device_array_input_is_a_type_error():
    class FakeDeviceArray:
        __cuda_array_interface__ = {"shape": (3,), "typestr": "<f4", "data": (0, False), "version": 3}

    with pytest.raises(TypeError, match="device array"):
        StreamPipeline(chunk=4).run(FakeDeviceArray())


def test_compute_dtype_is_checked_before_gpu_work():
    class Typed:
        input_dtype = np.dtype(np.uint32)

        def __call__(self, s, x, y):
            pass

    with pytest.raises(ValueError, match="takes uint32 input, got float32"):
        StreamPipeline(compute=Typed(), chunk=4).run(np.ones(16, np.float32))


def test_no_rows_give_no_rows_without_a_gpu():
    """An input with no rows is nothing to run (as map() over nothing), not an error: the
    stream form's output spec says the output's row shape, and nothing is made on the GPU."""
    pipe = StreamPipeline(compute=lambda s, a, b: None, chunk=4, output=((3,), np.float64))
    y = pipe.run(np.zeros((0, 4), np.float32))
    assert y.shape == (0, 3) and y.dtype == np.float64
    ys = pipe.run_batches([np.zeros((0, 4), np.float32), np.zeros((0, 2), np.float32)])
    assert [(a.shape, a.dtype) for a in ys] == [((0, 3), np.float64)] * 2
    with pytest.raises(ValueError, match="2 outputs for 1 batches"):
        pipe.run_batches([np.zeros((0, 4), np.float32)], outs=[np.zeros((0, 3))] * 2)
    assert not pipe._started


def test_run_batches_checks():
    pipe = StreamPipeline(compute=lambda s, a, b: None)
    assert pipe.run_batches([]) == [] and pipe.run_batches((), outs=[]) == []  # as map() over nothing
    assert StreamPipeline(compute=lambda s, a, b: None, output=None).run_batches([]) is None
    with pytest.raises(ValueError, match="1 outputs for 0 batches"):
        pipe.run_batches([], outs=[np.ones(3, np.float32)])
    with pytest.raises(ValueError, match="batch 1 is empty"):  # (rows of nothing; no rows is no error)
        pipe.run_batches([np.ones((3, 2), np.float32), np.ones((3, 0), np.float32)])
    with pytest.raises(ValueError, match="batch 1 has dtype"):
        pipe.run_batches([np.ones(3, np.float32), np.ones(3, np.int32)])
    with pytest.raises(ValueError, match="2 outputs for 1 batches"):
        pipe.run_batches([np.ones(3, np.float32)], outs=[np.ones(3, np.float32)] * 2)
    with pytest.raises(ValueError, match=r"outs\[0\] has shape"):
        pipe.run_batches([np.ones(3, np.float32)], outs=[np.ones(4, np.float32)])
    with pytest.raises(TypeError, match="sequence of arrays"):
        pipe.run_batches(np.ones((3, 3), np.float32))
    assert not pipe._started


@pytest.mark.parametrize("numpy_from", [256, 0], ids=["python", "numpy"])
def test_outputs_apart_from_other_batches_inputs_agrees_with_every_pair(monkeypatch, numpy_from):
    """run_batches' overlap check (a sorted sweep with a first pass in plain Python for short
    lists, in NumPy for long ones) against the rule itself, pair by pair, on random lists cut
    from one buffer: outputs over another batch's input are refused (naming the first such
    output), over their own input are in place, and addresses read once give the same
    answers as the arrays'."""
    from fullpipe.pipeline import executor
    from fullpipe.pipeline.executor import _check_outputs_apart

    monkeypatch.setattr(executor, "_APART_NUMPY_FROM", numpy_from)

    rng = np.random.default_rng(48)
    buf = np.zeros(4096, np.uint8)
    base = buf.ctypes.data
    refused = in_place = apart = 0
    for trial in range(400):
        def cut(n):  # (some long: spans that cover others, which a sweep must look past)
            starts = rng.integers(0, 4000, n)
            return [buf[a:a + int(rng.integers(0 if trial % 7 == 0 else 1, 800 if rng.random() < 0.2 else 96))]
                    for a in starts]
        n = int(rng.integers(1, 12))
        inputs = cut(n)
        outs = cut(n) if trial % 3 else [x if rng.random() < 0.5 else o for x, o in zip(inputs, cut(n))]
        if trial % 5 == 0:  # most lists have their outputs elsewhere
            outs = [np.zeros(len(o), np.uint8) for o in outs]

        def span(a):
            lo = a.ctypes.data
            return lo, lo + a.nbytes
        first_bad, own = None, False
        for i, o in enumerate(outs):
            lo, hi = span(o)
            for j, x in enumerate(inputs):
                a, z = span(x)
                if x.nbytes and a < hi and lo < z:
                    if j != i and first_bad is None:
                        first_bad = i
                    own |= j == i
        for addressed in (False, True):
            args = ([o.ctypes.data for o in outs], [x.ctypes.data for x in inputs]) if addressed else ()
            if first_bad is not None:
                with pytest.raises(ValueError, match=rf"outs\[{first_bad}\] shares memory with batch"):
                    _check_outputs_apart(outs, inputs, *args)
            else:
                assert _check_outputs_apart(outs, inputs, *args) is own
        refused += first_bad is not None
        in_place += first_bad is None and own
        apart += first_bad is None and not own
    assert base and min(refused, in_place, apart) > 20  # (each answer met often)


# --------------------------------------------------------------------------- planning
def test_chunk_bounds_cover_every_row_once():
    for rows in (1, 7, 100, 1001):
        for chunk in (1, 3, 100, 5000):
            b = plan.chunk_bounds(rows, chunk)
            assert b[0][0] == 0 and b[-1][1] == rows
            assert all(b0[1] == b1[0] for b0, b1 in zip(b, b[1:]))
            assert all(0 < hi - lo <= chunk for lo, hi in b)
    assert plan.chunk_bounds(10, 4, start=3) == [(3, 7), (7, 10)]


def test_batches_view_the_users_arrays():
    x = np.arange(20, dtype=np.float32).reshape(10, 2)
    out = np.empty_like(x)
    bs = plan.batches_from_array(x, out, plan.chunk_bounds(10, 4), first_index=3)
    assert [b.index for b in bs] == [3, 4, 5]
    assert [b.rows for b in bs] == [(0, 4), (4, 8), (8, 10)]
    assert bs[2].src.base is x or np.shares_memory(bs[2].src, x)
    assert np.shares_memory(bs[1].dst, out) and bs[1].in_bytes == 4 * 2 * 4


def test_output_spec_shapes():
    spec = plan.parse_output(((5,), np.float16))
    assert spec.shape_for((7, 3)) == (7, 5) and spec.dtype_for(np.dtype(np.float32)) == np.float16
    same = plan.parse_output("same")
    assert same.shape_for((7, 3)) == (7, 3) and plan.parse_output(None).none


def test_parse_chunk_sizes():
    assert tuning.parse_chunk("auto") == "auto"
    assert tuning.parse_chunk(128) == 128
    assert tuning.parse_chunk("8MiB") == f"{8 * MiB}B"
    assert tuning.parse_chunk("1.5 kb") == "1500B"
    assert tuning.chunk_rows(tuning.parse_chunk("8MiB"), row_bytes=4096, rows=10_000) == 2048
    assert tuning.chunk_rows(tuning.parse_chunk("1B"), row_bytes=4096, rows=10) == 1
    assert tuning.chunk_rows(1000, row_bytes=4, rows=10) == 10


# --------------------------------------------------------------------------- tuning
def _models(h2d_gbps=55.0, compute_gbps=55.0, d2h_gbps=55.0, copy_latency=10e-6, launch=5e-6):
    return {
        "h2d": tuning.StageModel(copy_latency, 1 / (h2d_gbps * 1e9)),
        "compute": tuning.StageModel(launch, 1 / (compute_gbps * 1e9)),
        "d2h": tuning.StageModel(copy_latency, 1 / (d2h_gbps * 1e9)),
    }


def test_stage_model_fit_recovers_a_line_and_clamps_noise():
    m = tuning.StageModel.fit(1e6, 10e-6 + 1e6 / 50e9, 8e6, 10e-6 + 8e6 / 50e9)
    assert m.fixed_s == pytest.approx(10e-6) and m.per_byte_s == pytest.approx(1 / 50e9)
    noisy = tuning.StageModel.fit(1e6, 50e-6, 8e6, 40e-6)  # bigger chunk measured faster
    assert noisy.per_byte_s > 0 and noisy.fixed_s >= 0


def test_auto_chunk_amortises_copy_latency_for_copy_bound_work():
    c = tuning.choose_chunk(_models(compute_gbps=500), total_bytes=4 << 30, row_bytes=4, streams=3,
                            host_s=20e-6, device_budget_bytes=40 << 30)
    # 10 us latency at 55 GB/s needs ~10.5 MB for 95 %: the choice must be at least that.
    assert c.bound_stage in ("h2d", "d2h")
    assert c.nbytes >= 10_450_000 and c.predicted_efficiency >= 0.95
    assert c.nbytes % MiB == 0 and "Rates:" in c.reason and "bound by" in c.reason


def test_auto_chunk_grows_when_host_enqueue_dominates():
    fast_host = tuning.choose_chunk(_models(), total_bytes=8 << 30, row_bytes=4, streams=3,
                                    host_s=5e-6, device_budget_bytes=40 << 30)
    slow_host = tuning.choose_chunk(_models(), total_bytes=8 << 30, row_bytes=4, streams=3,
                                    host_s=2e-3, device_budget_bytes=40 << 30)
    assert slow_host.nbytes > fast_host.nbytes
    assert slow_host.nbytes / 55e9 >= 0.95 * 2e-3


def test_auto_chunk_takes_the_middle_of_the_sizes_predicted_about_as_good():
    """Copy-bound work with small fixed costs: T(C) is within 1 % of its best over a wide
    range. The choice sits inside that range, not at its small edge, where a host time
    per batch larger than measured makes the run host-bound."""
    models, total, host = _models(compute_gbps=500), 1 << 30, tuning.StageModel(100e-6, 0.0)
    c = tuning.choose_chunk(models, total_bytes=total, row_bytes=4096, streams=3, host_s=host.fixed_s,
                            device_budget_bytes=40 << 30)
    sizes = [n * MiB for n in range(1, 257)]
    best = min(tuning.predicted_time(models, host, total, n) for n in sizes)
    band = [n for n in sizes if tuning.predicted_time(models, host, total, n) <= best * (1 + tuning.TIE)]
    assert band[-1] >= 3 * band[0]  # (a wide band: the case this is about)
    assert 1.5 * band[0] <= c.nbytes <= band[-1] / 1.5, (c.nbytes, band[0], band[-1])


def test_auto_chunk_counts_a_streams_batches_one_after_another():
    """Each batch's H2D, compute and D2H run on one of the streams, and a stream's next H2D
    waits for its last D2H: with two streams and three equal stages, a chunk takes 1.5x
    its slowest stage, so fixed costs weigh more and the choice is larger."""
    models = _models(copy_latency=40e-6, launch=40e-6)
    host = tuning.StageModel(20e-6, 0.0)
    total, n = 1 << 30, 8 * MiB
    one_stage = models["h2d"].time(n)
    assert tuning.predicted_time(models, host, total, n, lanes=2) == pytest.approx(
        tuning.predicted_time(models, host, total, n) + (total // n) * 0.5 * one_stage)

    def choose(lanes):
        return tuning.choose_chunk(models, total_bytes=total, row_bytes=4096, streams=2, host_s=host.fixed_s,
                                   device_budget_bytes=40 << 30, lanes=lanes).nbytes

    assert choose(2) > choose(0)


def test_auto_chunk_keeps_a_chunk_for_a_costly_new_shape_until_the_losses_add_up_to_it():
    """A compute whose new batch shapes cost seconds (a mobilenet's cuDNN setup, session 19):
    the chunk the runs before used is kept although it is predicted slower than the best,
    while what keeping it has lost so far and this run's loss add up to no more than one new
    shape's cost; past that, the best is taken (rent, then buy)."""
    models, total = _models(copy_latency=40e-6, launch=400e-6), 1 << 30
    args = dict(total_bytes=total, row_bytes=4096, streams=3, host_s=100e-6, device_budget_bytes=40 << 30)
    best = tuning.choose_chunk(models, **args)
    keep = best.nbytes // 4  # launch-bound there: predicted well over 5 % slower
    host = tuning.StageModel(100e-6, 0.0)
    loss = tuning.predicted_time(models, host, total, keep) - tuning.predicted_time(models, host, total, best.nbytes)
    assert loss > 0.05 * best.predicted_ms * 1e-3
    plain = tuning.choose_chunk(models, keep_bytes=keep, **args)
    assert plain.nbytes == best.nbytes and plain.keep_loss_ms == 0.0  # no new-shape cost: the best
    kept = tuning.choose_chunk(models, keep_bytes=keep, new_shape_s=10 * loss, kept_loss_s=8.5 * loss, **args)
    assert kept.nbytes == keep and kept.keep_loss_ms == pytest.approx(loss * 1e3, rel=0.02)
    assert "per-shape setup" in kept.reason
    bought = tuning.choose_chunk(models, keep_bytes=keep, new_shape_s=10 * loss, kept_loss_s=9.5 * loss, **args)
    assert bought.nbytes == best.nbytes and bought.keep_loss_ms == 0.0


def test_auto_chunk_of_large_rows_splits_the_run_into_even_chunks():
    """Large rows (a 224-px image each): the chosen chunk cuts the run into chunks of even rows,
    as many as the best size's: a short last chunk is a new batch shape, which a compute with
    costly shapes runs padded to a whole chunk (predicted as a whole one, so never slower)."""
    row, total = 150528, 2092
    models, host = _models(compute_gbps=80, launch=1e-3), tuning.StageModel(2e-3, 0.0)
    c = tuning.choose_chunk(models, total_bytes=total * row, row_bytes=row, streams=3, host_s=host.fixed_s,
                            device_budget_bytes=40 << 30)
    count = -(-total // c.rows)
    assert count * c.rows - total < count, (c.rows, count)
    grid = [tuning.predicted_time(models, host, total * row, r * row) for r in range(100, total // 3 + 1)]
    assert c.predicted_ms * 1e-3 <= min(grid) * (1 + tuning.TIE)


def test_auto_chunk_capped_by_input_size_and_memory():
    small = tuning.choose_chunk(_models(), total_bytes=24 * MiB, row_bytes=4, streams=3,
                                host_s=20e-6, device_budget_bytes=40 << 30)
    assert small.nbytes <= 24 * MiB // 12 and "capped by" in small.reason
    tight = tuning.choose_chunk(_models(), total_bytes=8 << 30, row_bytes=4, streams=4,
                                host_s=20e-6, device_budget_bytes=64 * MiB)
    assert tight.nbytes <= 64 * MiB // (4 * 2 * 2) and "device memory" in tight.reason


def test_auto_chunk_whole_rows():
    c = tuning.choose_chunk(_models(), total_bytes=4 << 30, row_bytes=3 * 1000, streams=2,
                            host_s=20e-6, device_budget_bytes=40 << 30)
    assert c.nbytes == c.rows * 3000


def test_probe_rows():
    assert tuning.probe_rows(1000, 1000) == []  # 1 MB: too small to probe
    p = tuning.probe_rows(64 * MiB // 4, 4)
    assert p[0] == p[1] == MiB // 4 and p[2] == 8 * MiB // 4
    # a compute probed twice at each size: the larger probe is an even split of the run near
    # 64 MiB (a likely chunk), the smaller a quarter of it, both probed twice within a quarter of
    # the input
    image = 224 * 224 * 3
    for images, want in ((4096, 410), (2048, 205), (1001, 91)):  # 10 chunks, 11 for 1001
        small, again, large = tuning.probe_rows(images, image, likely_chunk=True)
        assert large == want and small == again == large // 4 and 2 * (small + large) <= images // 4
        assert -(-images // large) == (10 if images != 1001 else 11)
    rows = (4 << 30) // 4096  # 4 GiB of 4 KiB rows: 64 chunks of 64 MiB
    assert [r * 4096 for r in tuning.probe_rows(rows, 4096, likely_chunk=True)] == [16 * MiB, 16 * MiB, 64 * MiB]
    # too little input for a split into 10 chunks larger than 8 MiB: 8 MiB as for any compute
    assert tuning.probe_rows(48 * MiB // 64, 64, likely_chunk=True) == tuning.probe_rows(48 * MiB // 64, 64)


# --------------------------------------------------------------------------- stats
def test_union_length_and_concurrency():
    assert stats.union_length([(0, 1), (0.5, 2), (3, 4)]) == pytest.approx(3.0)
    assert stats.union_length([]) == 0.0
    assert stats.union_length([(1, 1), (2, 1)]) == 0.0
    assert stats.max_concurrency([(0, 2), (1, 3), (2, 4)]) == 2  # end at 2 closes before start at 2
    assert stats.max_concurrency([(0, 10)] * 128 + [(10, 20)] * 72) == 128


def test_pipeline_stats_bound_and_overlap():
    t = [stats.BatchTiming(i, (i * 1.0, i + 1.0, i + 2.0, i + 3.0)) for i in range(10)]
    busy = stats.busy_from_timings(t, True, True)
    assert busy == {"h2d": pytest.approx(10.0), "compute": pytest.approx(10.0), "d2h": pytest.approx(10.0)}
    st = stats.PipelineStats(batches=10, bytes_in=10 * 10**6, bytes_out=10 * 10**6, wall_ms=12.0,
                             gpu_span_ms=12.0, busy_ms=busy)
    assert st.bound_ms == pytest.approx(10.0) and st.ratio_to_bound == pytest.approx(10 / 12)
    assert st.overlap == pytest.approx(30 / 12) and st.stage_gbps("h2d") == pytest.approx(1.0)
    assert "of bound" in str(st) and st.as_dict()["bound_stage"] in ("h2d", "compute", "d2h")


def test_a_copy_fit_keeps_no_waiting_as_a_fixed_cost_per_chunk():
    """Session 17, call 18 (H100, a 1 GiB bf16 MLP in and out, pinned in place): after runs at
    28 and 103 MiB the refit models were H2D 302 us + 50.2 GB/s, compute 108 us + 135 GB/s,
    D2H 61 us + 50.4 GB/s, with 283 us of host time per batch. They chose 103 MiB, which ran
    at 0.939x the best fixed chunk; the sweep in the same rounds read 16/32/64/96/128 MiB at
    0.976/1.000/0.996/0.952/0.938 of the best. A copy's own cost per chunk is microseconds:
    with it capped (the time at 103 MiB kept), the choice falls where the sweep was within
    2.5 % of its best."""
    mib, gbs = tuning.MiB, (lambda g: 1e-9 / g)
    fitted = {"h2d": tuning.StageModel(302.3e-6, gbs(50.2)), "compute": tuning.StageModel(108.2e-6, gbs(134.7)),
              "d2h": tuning.StageModel(60.7e-6, gbs(50.4))}

    def choose(models):
        return tuning.choose_chunk(models, total_bytes=1 << 30, row_bytes=4096, streams=3, host_s=283e-6,
                                   device_budget_bytes=40 << 30, lanes=3, min_bytes=4 * mib).nbytes

    assert choose(fitted) >= 96 * mib  # the choice of that call
    capped = {k: tuning.copy_model(m, 103 * mib) if k in tuning.COPY_STAGES else m for k, m in fitted.items()}
    for k in tuning.COPY_STAGES:
        assert capped[k].fixed_s == tuning.COPY_FIXED_MAX_S
        assert capped[k].time(103 * mib) == pytest.approx(fitted[k].time(103 * mib))
    assert 16 * mib <= choose(capped) <= 64 * mib
    small = tuning.StageModel(5e-6, gbs(50.0))
    assert tuning.copy_model(small, 64 * mib) is small  # under the cap: as fitted


def test_stats_say_when_the_host_is_the_limit():
    """Numbers of session 16's recorded `bench workloads` (H100): the encoder layer's call
    took 441 us per batch (478 us with fullpipe's enqueue) against 516 us of GPU compute
    per batch: host-bound, and the stats say so with the remedy. The bf16 MLP's call took
    185 us against 650 us per batch of H2D: not host-bound. Graph runs: no hint."""
    enc = stats.PipelineStats(batches=127, wall_ms=69.1, gpu_span_ms=68.0,
                              busy_ms={"h2d": 20.0, "compute": 127 * 0.516, "d2h": 5.0}, enqueue_us_per_batch=478.0,
                              host_us={"front": 15.0, "compute_call": 441.0, "back": 22.0})
    hint = enc.host_bound_hint
    assert hint and "441 us" in hint and "516 us" in hint and "graph=True" in hint
    assert f"hint: {hint}" in str(enc) and enc.as_dict()["host_bound_hint"] == hint
    mlp = stats.PipelineStats(batches=37, wall_ms=24.9, gpu_span_ms=24.5,
                              busy_ms={"h2d": 37 * 0.650, "compute": 10.0, "d2h": 22.0}, enqueue_us_per_batch=233.0,
                              host_us={"front": 16.0, "compute_call": 185.0, "back": 32.0})
    assert mlp.host_bound_hint is None and "hint:" not in str(mlp)
    graphed = dataclasses.replace(enc, graph={"reason": "replayed"})
    assert graphed.host_bound_hint is None
    # batches of many shapes (that run's 127 came in 96): a graph per stream and shape would not
    # fit the cache, so the hint says to bucket them first; a few shapes: graph=True as it is
    many = dataclasses.replace(enc, streams=3, input_shapes=96)
    assert "96 shapes" in many.host_bound_hint and "bucket" in many.host_bound_hint
    few = dataclasses.replace(enc, streams=3, input_shapes=4)
    assert "bucket" not in few.host_bound_hint and "graph=True replays" in few.host_bound_hint


# --------------------------------------------------------------------------- staging helpers
def test_split_ranges_page_aligned_and_complete():
    for n in (1, 4096, 5000, 10 * MiB + 17):
        r = split_ranges(n, 5)
        assert r[0][0] == 0 and r[-1][1] == n and len(r) <= 5
        assert all(a % 4096 == 0 for a, _ in r)


def test_host_copier_gives_each_thread_at_least_a_min_piece(monkeypatch):
    from fullpipe.pipeline import pageable

    seen = []
    real = pageable.split_ranges
    monkeypatch.setattr(pageable, "split_ranges", lambda n, parts, **kw: seen.append(parts) or real(n, parts))
    src = np.ones(16 * MiB, np.uint8)
    dst = np.zeros_like(src)
    c = HostCopier(5)
    try:
        for nbytes in (1 * MiB, 3 * MiB, 4 * MiB, 16 * MiB):
            c.copy(dst.ctypes.data, src.ctypes.data, nbytes)
    finally:
        c.close()
    assert seen == [2, 5]  # 1 and 3 MiB: one thread; 4 MiB: two pieces; 16 MiB: all five threads
    assert dst[:16 * MiB].all()


def test_host_copier_copies_every_byte():
    src = np.random.default_rng(0).integers(0, 255, 7 * MiB + 123, dtype=np.uint8)
    dst = np.zeros_like(src)
    c = HostCopier(4)
    try:
        c.copy(dst.ctypes.data, src.ctypes.data, src.nbytes)
    finally:
        c.close()
    np.testing.assert_array_equal(dst, src)


def test_host_copier_copy_many_splits_the_list_over_threads_by_bytes():
    """Bulk staging's many small copies: cut into runs of about equal bytes, one task per
    run on the copier's threads (the first on the calling thread), never a copy split;
    every byte where it belongs; a small total stays on the calling thread."""
    rng = np.random.default_rng(3)
    sizes = [int(n) for n in rng.integers(1, 400_000, 80)]  # ~16 MB of copies up to 390 KiB
    src = rng.integers(0, 255, sum(sizes), dtype=np.uint8)
    dst = np.zeros_like(src)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    copies = [(dst.ctypes.data + int(o), src.ctypes.data + int(o), n) for o, n in zip(offsets, sizes)]
    c = HostCopier(4)
    submitted: list[int] = []
    real_submit = c._pool.submit

    def submit(fn, run):
        submitted.append(sum(n for _, _, n in run))
        return real_submit(fn, run)

    c._pool.submit = submit
    try:
        c.copy_many(copies)
        np.testing.assert_array_equal(dst, src)
        assert len(submitted) == 3  # four runs: three on the pool, one here
        share = src.nbytes / 4
        assert all(0.75 * share < b < 1.25 * share for b in submitted), (submitted, share)
        submitted.clear()
        c.copy_many(copies[:3])  # a few hundred KB: not worth a thread
        assert submitted == []
        # submit_many: the same cut, every run on the pool (the caller goes on meanwhile)
        dst[:] = 0
        futures = c.submit_many(copies)
        for f in futures:
            f.result()
        np.testing.assert_array_equal(dst, src)
        assert len(futures) == len(submitted) == 3
        share = src.nbytes / 3
        assert all(0.75 * share < b < 1.25 * share for b in submitted), (submitted, share)
    finally:
        c.close()


@pytest.mark.skipif(not native_host_functions_available(), reason="no POSIX semaphores")
def test_native_semaphore_signal_counts_and_stops():
    sig = HostFnSignal(initial=1)
    stop = threading.Event()
    sig.wait(stop)  # the initial count
    # sem_post, called the way the driver calls the host function: a C function pointer
    import ctypes

    from fullpipe.pipeline import staging

    address = ctypes.cast(staging._load_libc().sem_post, ctypes.c_void_p).value
    assert int(sig._fn) == address  # the host function handed to cuLaunchHostFunc is sem_post
    post = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(address)
    threading.Timer(0.05, post, args=(sig._sem.address,)).start()
    t0 = time.perf_counter()
    sig.wait(stop)
    assert time.perf_counter() - t0 < 2.0
    threading.Timer(0.05, stop.set).start()
    with pytest.raises(Stopped):
        sig.wait(stop)
    sig.close()


def test_reference_matches_a_scalar_model():
    x = np.array([0, 1, 0xFFFFFFFF, 123456789], dtype=np.uint32)

    def scalar(v, rounds):
        for _ in range(rounds):
            v = (v * 1664525 + 1013904223) & 0xFFFFFFFF
            v ^= v >> 13
        return v

    got = reference(x, 5)
    assert got.dtype == np.uint32
    assert [int(g) for g in got] == [scalar(int(v), 5) for v in x]
    np.testing.assert_array_equal(reference(x, 0), x)


def test_the_host_bound_hint_and_compute_threads():
    """Session 18's bench encoder on a slow H100 host: the layer's call 651 us per batch
    against ~500 us of GPU compute on one thread: the hint names compute_threads (the call
    is most of the host's time). On 3 threads the calls (1184 us each, overlapping) no
    longer set the pace: no hint. A host-bound run whose time is fullpipe's own enqueue,
    not the call, is not pointed at threads."""
    one = stats.PipelineStats(batches=127, streams=3, wall_ms=96.7, gpu_span_ms=95.0,
                              busy_ms={"h2d": 1.0, "compute": 127 * 0.500, "d2h": 3.0},
                              enqueue_us_per_batch=703.0,
                              host_us={"front": 10.0, "compute_call": 651.0, "back": 42.0})
    assert "compute_threads=3" in one.host_bound_hint
    threads = dataclasses.replace(one, compute_threads={"threads": 3, "wait_ms": 30.0}, enqueue_us_per_batch=91.0,
                                  host_us={"front": 10.0, "compute_call": 1184.0, "back": 81.0})
    assert threads.host_bound_hint is None
    assert "compute calls: on 3 host threads" in str(threads)
    own = dataclasses.replace(one, enqueue_us_per_batch=600.0, host_us={"front": 300.0, "compute_call": 60.0,
                                                                        "back": 240.0})
    assert own.host_bound_hint is not None and "compute_threads" not in own.host_bound_hint


def test_an_input_too_small_to_probe_is_split_into_chunks_of_at_least_4_mib():
    """Two chunks per stream, but none under MIN_SPLIT_CHUNK_BYTES: a small request is one
    chunk (split into six it ran at a third of the speed of one chunk, session 20)."""
    per = tuning.even_split_rows
    assert per(1000, 256, 3) == 1000  # 256 KB: one chunk
    assert per(7 * MiB // 4096, 4096, 3) == 7 * MiB // 4096  # 7 MiB: one chunk
    assert per(8 * MiB // 4096, 4096, 3) == 8 * MiB // 4096 // 2  # 8 MiB: two chunks of 4 MiB
    assert per(15 * MiB // 4096, 4096, 3) == -(-(15 * MiB // 4096) // 3)  # 15 MiB: three
    assert per(64 * MiB // 4096, 4096, 3) == -(-(64 * MiB // 4096) // 6)  # at most two per stream
    assert per(64 * MiB // 4096, 4096, 1) == 64 * MiB // 4096 // 2
    assert per(7, 1, 3) == 7 and per(1, 10 * MiB, 3) == 1  # tiny; one row larger than the floor


def test_host_address_is_the_first_byte_of_any_host_array():
    """plan.host_address: through the buffer protocol where it can (a writable C-contiguous
    array of at least a byte), else ctypes.data; the same address either way, for views at
    an offset, read-only arrays, empty arrays, strided views, structured dtypes and arrays
    over foreign memory, and the array is not held (it can still be resized)."""
    import ctypes

    from fullpipe.pipeline.plan import host_address

    base = np.arange(1000, dtype=np.float32)
    ro = np.frombuffer(bytes(64), np.uint8)
    foreign_buf = (ctypes.c_uint8 * 256)()
    foreign = np.ctypeslib.as_array(foreign_buf)
    cases = [base, base[7:300], base.reshape(10, 100)[3:], ro, base[:0], base[::3], base.reshape(10, 100)[:, 5],
             np.zeros(4, dtype=[("a", "<i4"), ("b", "<f8")]), foreign[16:]]
    assert not ro.flags.writeable and not base[::3].flags.c_contiguous
    for a in cases:
        assert host_address(a) == a.ctypes.data, a
    assert host_address(foreign[16:]) == ctypes.addressof(foreign_buf) + 16
    grow = np.zeros(16, np.uint8)
    host_address(grow)
    grow.resize(32, refcheck=False)  # (no buffer export left behind)
