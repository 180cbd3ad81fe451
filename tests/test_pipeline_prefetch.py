"""Issue order (prefetch), chunk="auto" reuse and choice, chunk parsing and warnings,
pinned-pool accounting: the executor against the fake drivers of
test_pipeline_fakecuda.py, with the driver calls recorded in order."""

from __future__ import annotations

import gc
import warnings

import numpy as np
import pytest

from fullpipe.pipeline import StreamPipeline, tuning
from fullpipe.pipeline.executor import PipelineWarning
from fullpipe.pipeline.workload import reference
from tests.test_pipeline_fakecuda import FakeMix, _assert_clean, fake  # noqa: F401 - fixture
from tests.test_pipeline_protocol import Recorder

# These tests are of the staging ring: small pageable batches go through it, not in bulk.
pytestmark = pytest.mark.usefixtures("ring_staging")

MiB = 1 << 20


def batch_of_calls(rec, pipe, x_rows_per_batch):
    """The recorded calls with H2D/compute/D2H tagged by batch (in issue order)."""
    calls = rec.named(pipe)
    out, n_h2d, n_comp, n_d2h = [], 0, 0, 0
    for c in calls:
        if c[0] == "h2d":
            out.append(("h2d", n_h2d, c[1]))
            n_h2d += 1
        elif c[0] == "compute":
            out.append(("compute", n_comp, c[1]))
            n_comp += 1
        elif c[0] == "d2h":
            out.append(("d2h", n_d2h, c[1]))
            n_d2h += 1
    return out


def run_recorded(fake, monkeypatch, *, streams, pinned, batches=5, **options):
    rec = Recorder(monkeypatch, fake.driver)
    x = np.random.default_rng(0).integers(0, 2**32, batches * 1000, dtype=np.uint32)
    out = np.zeros_like(x)
    if pinned:
        fake.pinned.update({x.ctypes.data, out.ctypes.data})
    pipe = StreamPipeline(rec.compute(FakeMix(2)), streams=streams, chunk=1000, timing=False, **options)
    pipe.run(x, out=out)
    np.testing.assert_array_equal(out, reference(x, 2))
    _assert_clean(pipe)
    return batch_of_calls(rec, pipe, 1000), pipe


def test_next_h2ds_are_issued_before_the_compute_call(fake, monkeypatch):
    """3 streams, pinned: H2D(j+1) and H2D(j+2) are enqueued before compute(j) is called,
    each on its own lane; each batch's steps stay in order on its stream."""
    calls, pipe = run_recorded(fake, monkeypatch, streams=3, pinned=True)
    assert pipe.stats.prefetch == 2
    assert calls == [
        ("h2d", 0, "s0"), ("h2d", 1, "s1"), ("h2d", 2, "s2"),
        ("compute", 0, "s0"), ("d2h", 0, "s0"),
        ("h2d", 3, "s0"),  # behind batch 0's D2H on s0: the front of j+3 never passes j's back
        ("compute", 1, "s1"), ("d2h", 1, "s1"),
        ("h2d", 4, "s1"),
        ("compute", 2, "s2"), ("d2h", 2, "s2"),
        ("compute", 3, "s0"), ("d2h", 3, "s0"),
        ("compute", 4, "s1"), ("d2h", 4, "s1"),
    ]


def test_prefetch_of_pageable_input_is_bounded_by_the_ring(fake, monkeypatch):
    """slots=2: one batch ahead at most (the stager must not wait for this batch's H2D
    before its compute is even called)."""
    calls, pipe = run_recorded(fake, monkeypatch, streams=3, pinned=False, slots=2)
    assert pipe.stats.prefetch == 1
    order = [(k, j) for k, j, _ in calls]
    for j in range(4):
        assert order.index(("h2d", j + 1)) < order.index(("compute", j))
        if j + 2 < 5:
            assert order.index(("h2d", j + 2)) > order.index(("compute", j))


@pytest.mark.parametrize("options", [dict(streams=1), dict(streams=3, prefetch=0), dict(streams=3, synchronous=True)])
def test_no_prefetch_keeps_the_batch_order(fake, monkeypatch, options):
    calls, pipe = run_recorded(fake, monkeypatch, pinned=True, **options)
    assert pipe.stats.prefetch == 0
    assert [(k, j) for k, j, _ in calls] == [(k, j) for j in range(5) for k in ("h2d", "compute", "d2h")]


def test_copy_streams_with_prefetch_frees_only_finished_buffers(fake, monkeypatch):
    """copy_streams: every H2D on 'in', ahead of the compute; the lagged frees still wait
    for their D2H (FakePool poisons a buffer freed too early)."""
    calls, pipe = run_recorded(fake, monkeypatch, streams=2, pinned=True, batches=12, copy_streams=True)
    assert pipe.stats.prefetch == 1
    assert {s for k, _, s in calls if k == "h2d"} == {"in"}
    order = [(k, j) for k, j, _ in calls]
    assert order.index(("h2d", 1)) < order.index(("compute", 0))


@pytest.mark.parametrize("fail_at", [0, 5])
def test_failure_with_prefetched_batches_returns_everything(fake, fail_at):
    """A compute error while later batches' H2Ds are already enqueued: their buffers
    and timing events come back too."""
    batches = [np.arange(1000, dtype=np.uint32) + i for i in range(12)]
    pipe = StreamPipeline(FakeMix(fail_at=fail_at), streams=3, slots=4)
    with pytest.raises(RuntimeError) as info:
        pipe.run_batches(batches)
    assert info.value.batch_index == fail_at
    _assert_clean(pipe)
    pipe.compute = FakeMix()
    outs = pipe.run_batches(batches)
    np.testing.assert_array_equal(outs[11], reference(batches[11], 2))
    _assert_clean(pipe)


def test_stats_break_the_host_time_down(fake):
    x = np.arange(20_000, dtype=np.uint32)
    pipe = StreamPipeline(FakeMix(), streams=3, chunk=1000)
    pipe.run(x)
    h = pipe.stats.host_us
    assert set(h) == {"front", "compute_call", "back", "staging_wait"}
    assert h["front"] > 0 and h["compute_call"] > 0
    assert h["front"] + h["compute_call"] + h["back"] == pytest.approx(pipe.stats.enqueue_us_per_batch, rel=1e-6)
    assert "host per batch (us)" in str(pipe.stats)


# --------------------------------------------------------------------------- chunk="auto"
def test_auto_chunk_learns_from_its_runs_when_the_probes_overstate_the_host(fake):
    """The probes read the host time of a compute call that is slow only at first (a
    framework's first calls, the ring's threads competing for the host). The runs show
    the call's real cost: the models are lowered to it, the stats say so, and the next
    run chooses again from them, still exact. retune() forgets the refinements."""
    import time

    fake.jitter["value"] = 0.0

    class SlowInProbes(FakeMix):
        probing = False

        def __call__(self, stream, x, y):
            super().__call__(stream, x, y)
            if self.probing:
                time.sleep(0.02)

    x = np.random.default_rng(9).integers(0, 2**32, 64 * MiB // 4, dtype=np.uint32)
    f = SlowInProbes()
    pipe = StreamPipeline(f, streams=2, chunk="auto")
    real_probe = pipe._probe

    def slow_probe(*args, **kwargs):
        f.probing = True
        try:
            return real_probe(*args, **kwargs)
        finally:
            f.probing = False

    pipe._probe = slow_probe
    np.testing.assert_array_equal(pipe.run(x), reference(x, 2))
    assert pipe.stats.chunk["source"] == "tuned" and pipe.stats.chunk["refined_runs"] == 0
    (tuned,) = pipe._tuned.values()
    assert tuned.refined == 1 and tuned.host.fixed_s < 0.01  # the run's calls took well under the probes' 20 ms
    np.testing.assert_array_equal(pipe.run(x), reference(x, 2))
    second = pipe.stats.chunk
    assert second["source"] == "reused" and second["probe_batches"] == 0 and second["refined_runs"] >= 1
    assert "models refined from" in str(pipe.stats)
    pipe.retune()
    pipe.run(x)
    assert pipe.stats.chunk["source"] == "tuned" and pipe.stats.chunk["refined_runs"] == 0
    _assert_clean(pipe)


def test_refined_models_choose_a_smaller_chunk_for_a_cheaper_host(fake):
    """_refine on known numbers: a stage the run took less time for than its model
    predicts is scaled down to it (fixed and per-byte alike), one it took about as long
    for is kept, the host time per batch becomes the run's; the cached choices of that
    work are dropped, and the refined models choose a smaller chunk."""
    from fullpipe.pipeline import executor as fexec
    from fullpipe.pipeline.stats import PipelineStats
    from fullpipe.pipeline.tuning import StageModel, choose_chunk

    models = {"h2d": StageModel(20e-6, 1 / 50e9), "compute": StageModel(1e-3, 1 / 16e9),
              "d2h": StageModel(20e-6, 1 / 50e9)}
    tuned = fexec._Tuned(models, StageModel(2e-3, 0.0), 1.0, 0.0, 8 << 30, 1 * MiB)
    pipe = StreamPipeline(FakeMix(), streams=3, chunk="auto")
    key = ("some work",)
    pipe._tuned[key] = tuned
    pipe._choices[(key, 1000, 4)] = "a choice"
    pipe._choices[(("other work",), 1000, 4)] = "another"
    chunk, total = 64 * MiB, 1024 * MiB
    per_chunk = {"h2d": models["h2d"].time(chunk), "compute": models["compute"].time(chunk) / 8,
                 "d2h": models["d2h"].time(chunk) * 0.9}  # compute 8x faster than probed, d2h about as probed
    stats = PipelineStats(batches=16, bytes_in=total, busy_ms={k: v * 1e3 * total / chunk for k, v in per_chunk.items()},
                          enqueue_us_per_batch=250.0)
    pipe._refine(key, stats, chunk)
    got = pipe._tuned[key]
    assert got.refined == 1 and got.host == StageModel(250e-6, 0.0)
    assert got.models["compute"].time(chunk) == pytest.approx(per_chunk["compute"])
    assert got.models["compute"].fixed_s == pytest.approx(1e-3 / 8)
    assert got.models["h2d"] == models["h2d"] and got.models["d2h"] == models["d2h"]
    assert list(pipe._choices) == [(("other work",), 1000, 4)]

    def choose(t):
        return choose_chunk(t.models, total_bytes=total, row_bytes=4, streams=3, host_s=t.host.fixed_s,
                            device_budget_bytes=t.budget_bytes, min_bytes=t.fitted_from_bytes).nbytes

    assert choose(got) < choose(tuned)
    pipe._refine(key, stats, chunk)  # the same run again: nothing left to lower
    assert pipe._tuned[key].refined == 1
    faster = PipelineStats(batches=16, bytes_in=total, busy_ms={}, enqueue_us_per_batch=100.0)
    for _ in range(5):  # each a quarter faster again: refined at most MAX_REFINES times in all
        faster.enqueue_us_per_batch *= 0.75
        pipe._refine(key, faster, chunk)
    assert pipe._tuned[key].refined == fexec.MAX_REFINES


def test_runs_at_two_sizes_refit_a_fixed_cost_per_chunk_the_probes_missed():
    """A compute with a fixed GPU cost per chunk (it reads its weights once per chunk:
    400 us for 1.2 GB of weights at 3 TB/s) that the probes' fit missed (a fixed part
    clamped to 0), and a host time per batch 10x the steady runs' (as carried over from
    the ring; session 16 measured 7.7x). Runs simulated from the steady times: the first
    lowers the models and its chunk is not kept (chosen from a host time far off);
    lowering alone then rates small chunks by their per-byte time and picks one several
    times slower; the run at that second size refits the compute through both sizes,
    and the choice ends within 2 % of the best size by the steady times."""
    from fullpipe.pipeline import executor as fexec
    from fullpipe.pipeline.stats import PipelineStats
    from fullpipe.pipeline.tuning import StageModel, choose_chunk, predicted_time

    total, row = 1024 * MiB, 4096
    steady = {"h2d": StageModel(5e-6, 1 / 42e9), "compute": StageModel(400e-6, 1 / 30e9),
              "d2h": StageModel(5e-6, 1 / 48e9)}
    steady_host = StageModel(100e-6, 0.0)
    carried = {"h2d": StageModel(0.0, 1 / 38e9), "compute": StageModel(0.0, 1 / 10e9),
               "d2h": StageModel(1e-6, 1 / 48e9)}
    pipe = StreamPipeline(FakeMix(), streams=3, chunk="auto")
    key = ("some work",)
    pipe._tuned[key] = fexec._Tuned(carried, StageModel(1e-3, 0.0), 1.0, 0.0, 8 << 30, 1 * MiB)

    def choose():
        t = pipe._tuned[key]
        return choose_chunk(t.models, total_bytes=total, row_bytes=row, streams=3, host_s=t.host.fixed_s,
                            device_budget_bytes=t.budget_bytes, min_bytes=t.fitted_from_bytes,
                            keep_bytes=t.kept_bytes).nbytes

    def run(chunk):
        busy = {k: m.time(chunk) * 1e3 * total / chunk for k, m in steady.items()}
        pipe._refine(key, PipelineStats(batches=total // chunk, bytes_in=total, busy_ms=busy,
                                        enqueue_us_per_batch=steady_host.fixed_s * 1e6), chunk)

    def steady_ms(chunk):
        return predicted_time(steady, steady_host, total, chunk) * 1e3

    best = min(steady_ms(c * MiB) for c in range(1, 257))
    run(choose())
    assert pipe._tuned[key].kept_bytes == 0  # chosen from a host time 10x too large
    lowered_only = choose()
    assert steady_ms(lowered_only) > 2 * best  # no fixed compute time: far too small a chunk
    run(lowered_only)
    t = pipe._tuned[key]
    assert len(t.seen["compute"]) == 2 and t.models["compute"].fixed_s == pytest.approx(400e-6, rel=0.01)
    final = choose()
    assert steady_ms(final) <= 1.02 * best
    run(final)  # the refitted models predicted this run: nothing to correct, the choice stands
    assert pipe._tuned[key].refined == 2 and choose() == final


def test_a_run_at_a_new_batch_shape_does_not_teach_the_compute_its_setup():
    """A framework compute pays a new batch shape's setup at its first call (cuDNN plans): a
    run at a new chunk size carries it in its compute time. p291 (session 44, resnet18 at
    112 px on an H200): 44 ms of setup, the first run at 2048 rows 75 ms, the next 57; that
    first run refitted the compute to 3.6 GB/s (5.5 in fact), and with the refinements spent
    every later run was predicted at 93 ms. Here: the run at the new size with the setup in
    its compute time is not learnt from for the compute; the next at that size refits the
    compute through both sizes to the steady line; a setup small against the compute time
    (under REFIT_ABOVE of it) does not hold a run back, nor does a new shape in a run at a
    chunk size seen before (its shorter last chunk)."""
    from fullpipe.pipeline import executor as fexec
    from fullpipe.pipeline.stats import PipelineStats
    from fullpipe.pipeline.tuning import StageModel

    total = 308 * MiB
    steady = {"h2d": StageModel(5e-6, 1 / 45e9), "compute": StageModel(0.0, 1 / 5.5e9),
              "d2h": StageModel(5e-6, 1 / 400e9)}
    probed = dict(steady, compute=StageModel(0.0, 1 / 14.2e9))  # (the probes read it 2.6x too fast)
    pipe = StreamPipeline(FakeMix(), streams=3, chunk="auto")
    key = ("some work",)
    pipe._tuned[key] = fexec._Tuned(probed, StageModel(2.3e-3, 0.0), 1.0, 0.0, 8 << 30, 1 * MiB, new_shape_s=0.044)

    def run(chunk, setup_s=0.0):
        busy = {k: m.time(chunk) * 1e3 * total / chunk for k, m in steady.items()}
        busy["compute"] += setup_s * 1e3
        pipe._refine(key, PipelineStats(batches=total // chunk, bytes_in=total, busy_ms=busy,
                                        enqueue_us_per_batch=2300.0), chunk, new_shape_s=setup_s)

    run(48 * MiB)  # (a size seen before)
    run(73 * MiB, setup_s=0.044)  # the first run at a new size: compute not learnt from
    assert 73 * MiB not in pipe._tuned[key].seen["compute"]
    run(73 * MiB)
    compute = pipe._tuned[key].models["compute"]
    assert 1e-9 / compute.per_byte_s == pytest.approx(5.5, rel=0.02) and compute.fixed_s == pytest.approx(0, abs=1e-5)
    compute_s = total / 5.5e9
    run(100 * MiB, setup_s=compute_s * fexec.REFIT_ABOVE / 2)  # a small setup: learnt from
    assert 100 * MiB in pipe._tuned[key].seen["compute"]
    # a size seen before whose run met a new shape (its shorter last chunk, at a new row count
    # of the run) is learnt from: here a run 20 % quicker, its 4 ms of setup over REFIT_ABOVE
    before = pipe._tuned[key].seen["compute"][48 * MiB]
    busy = {k: m.time(48 * MiB) * 1e3 * total / (48 * MiB) for k, m in steady.items()}
    busy["compute"] = 0.8 * busy["compute"] + 4.0
    assert 4e-3 > fexec.REFIT_ABOVE * busy["compute"] / 1e3
    pipe._refine(key, PipelineStats(batches=total // (48 * MiB), bytes_in=total, busy_ms=busy,
                                    enqueue_us_per_batch=2300.0), 48 * MiB, new_shape_s=4e-3)
    got = pipe._tuned[key].seen["compute"][48 * MiB]
    assert got < before and got == pytest.approx(busy["compute"] / 1e3 * 48 / 308)


def test_refined_choice_keeps_the_chunk_in_use_when_it_is_about_as_good():
    """After a refinement, a chunk within KEEP_WITHIN of the best predicted time is kept
    (a new size would be a new batch shape for a framework model); one clearly worse
    is not, and the reason says which."""
    from fullpipe.pipeline.tuning import KEEP_WITHIN, StageModel, choose_chunk, predicted_time

    models = {"h2d": StageModel(20e-6, 1 / 50e9), "compute": StageModel(50e-6, 1 / 100e9),
              "d2h": StageModel(20e-6, 1 / 50e9)}
    total, host = 1024 * MiB, StageModel(200e-6, 0.0)

    def choose(keep):
        return choose_chunk(models, total_bytes=total, row_bytes=4096, streams=3, host_s=host.fixed_s,
                            device_budget_bytes=8 << 30, keep_bytes=keep)

    best = choose(0)
    t_best = predicted_time(models, host, total, best.nbytes)
    near = [c * MiB for c in range(2, 256) if c * MiB != best.nbytes
            and predicted_time(models, host, total, c * MiB) <= t_best * (1 + KEEP_WITHIN / 2)]
    far = [c * MiB for c in range(2, 256) if predicted_time(models, host, total, c * MiB) > t_best * 1.2]
    assert near and far
    kept = choose(near[-1])
    assert kept.nbytes == near[-1] and "the chunk of the runs before" in kept.reason
    assert choose(far[-1]).nbytes == best.nbytes


def test_auto_chunk_is_tuned_once_and_reused(fake):
    fake.jitter["value"] = 0.0
    x = np.random.default_rng(5).integers(0, 2**32, 48 * MiB // 4, dtype=np.uint32)
    pipe = StreamPipeline(FakeMix(0), streams=2, chunk="auto")
    np.testing.assert_array_equal(pipe.run(x), x)
    first = pipe.stats.chunk
    assert first["source"] == "tuned" and first["probe_batches"] >= 3
    y = pipe.run(x[: len(x) // 2])  # same kind of work, another size: no probes
    np.testing.assert_array_equal(y, x[: len(x) // 2])
    second = pipe.stats.chunk
    assert second["source"] == "reused" and second["probe_batches"] == 0
    assert pipe.probe_stats is None
    pipe.retune()
    pipe.run(x)
    assert pipe.stats.chunk["source"] == "tuned"
    # another kind of work (row shape) is tuned on its own
    pipe.run(x.reshape(-1, 4))
    assert pipe.stats.chunk["source"] == "tuned"


def test_auto_chunk_choice_is_weighed_once_per_run_size(fake, monkeypatch):
    """choose_chunk weighs a few hundred sizes (~1.5 ms of Python per call): a loop over
    same-sized arrays reuses its answer; another size, or a retune, weighs again."""
    import fullpipe.pipeline.executor as fexec

    fake.jitter["value"] = 0.0
    monkeypatch.setattr(fexec, "REFINE_BELOW", 0.0)  # (runs that refine the models weigh again: tested above)
    monkeypatch.setattr(fexec, "FIT_SPREAD", float("inf"))  # (so do runs at two sizes that refit them)
    calls = []
    real = fexec.choose_chunk
    monkeypatch.setattr(fexec, "choose_chunk", lambda *a, **k: calls.append(k["total_bytes"]) or real(*a, **k))
    x = np.random.default_rng(5).integers(0, 2**32, 48 * MiB // 4, dtype=np.uint32)
    pipe = StreamPipeline(FakeMix(0), streams=2, chunk="auto", staging="direct")
    for _ in range(3):
        np.testing.assert_array_equal(pipe.run(x), x)
    assert calls == [x.nbytes]  # the first run (after its probes) weighs the whole array's size
    chosen = pipe.stats.chunk["rows"]
    for _ in range(2):
        pipe.run(x)
    assert len(calls) == 1 and pipe.stats.chunk["rows"] == chosen
    pipe.run(x[: len(x) // 2])
    assert len(calls) == 2
    pipe.retune()
    pipe.run(x)
    assert len(calls) == 3 and pipe.stats.chunk["source"] == "tuned"


def test_compute_bound_with_launch_overhead_gets_big_chunks():
    """A framework model: 4 ms of Python launch per batch, GPU 0.07 ms per image; the
    old '4 chunks per stream' cap gave 12 chunks of 341 images. The choice must keep
    the GPU time per batch above the host's (with margin) and land in the flat optimum
    of the predicted total time."""
    row = 224 * 224 * 3
    models = {"h2d": tuning.StageModel(10e-6, 1 / 50e9), "compute": tuning.StageModel(4e-3, 0.07e-3 / row),
              "d2h": tuning.StageModel(10e-6, 1 / 50e9 / 75), "stage_in": tuning.StageModel(0, 1 / 18e9)}
    c = tuning.choose_chunk(models, total_bytes=4096 * row, row_bytes=row, streams=3, host_s=4e-3,
                            device_budget_bytes=40 << 30, out_over_in=2000 / row)
    assert 0.07e-3 * c.rows >= tuning.HOST_MARGIN * 4e-3  # the host stays ahead
    host = tuning.StageModel(4e-3, 0)
    t = {r: tuning.predicted_time(models, host, 4096 * row, r * row) for r in range(16, 4097, 16)}
    assert tuning.predicted_time(models, host, 4096 * row, c.rows * row) <= min(t.values()) * 1.02
    assert c.rows > 341


def test_choice_never_exceeds_device_memory_with_framework_memory():
    models = {"h2d": tuning.StageModel(10e-6, 1 / 50e9), "compute": tuning.StageModel(1e-3, 1 / 5e9),
              "d2h": tuning.StageModel(10e-6, 1 / 50e9)}
    free = tuning.choose_chunk(models, total_bytes=8 << 30, row_bytes=4096, streams=3, host_s=1e-3,
                               device_budget_bytes=4 << 30)
    heavy = tuning.choose_chunk(models, total_bytes=8 << 30, row_bytes=4096, streams=3, host_s=1e-3,
                                device_budget_bytes=4 << 30, device_bytes_per_byte=50.0)
    assert heavy.nbytes * (2 + 50) * 6 <= 4 << 30 and heavy.nbytes < free.nbytes
    assert "device memory" in heavy.reason


def test_chunk_rows_strings_and_bytes():
    assert tuning.parse_chunk("256 rows") == 256 and tuning.parse_chunk("1row") == 1
    assert tuning.parse_chunk("64 MB") == f"{64 * 10**6}B"
    with pytest.raises(ValueError, match="'256 rows'"):
        tuning.parse_chunk("256 bananas")
    with pytest.raises(ValueError, match=">= 1 row"):
        tuning.parse_chunk("0 rows")


def test_a_run_with_fewer_batches_than_streams_warns_and_says_int_is_rows(fake):
    x = np.arange(100_000, dtype=np.uint32)
    pipe = StreamPipeline(FakeMix(), streams=3, chunk=400_000)  # meant as bytes, taken as rows
    with pytest.warns(PipelineWarning, match="1 batch.*3 streams.*row count.*'400000B'") as caught:
        np.testing.assert_array_equal(pipe.run(x), reference(x, 2))
    assert caught[0].filename == __file__  # pointed at the caller's line
    with pytest.warns(PipelineWarning, match="2 batch") as caught:
        pipe.run_batches([x[:10], x[10:20]])
    assert caught[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        StreamPipeline(FakeMix(), streams=3, chunk="40000B").run(x)  # 10 chunks of 10_000 rows: no warning
    assert pipe.stats.batches == 2


# --------------------------------------------------------------------------- pinned pool
def test_pinned_input_output_comes_from_the_pool_and_is_reused(fake):
    from fullpipe.cuda.pinned_pool import default_pinned_pool

    pool = default_pinned_pool()
    x = pool.empty(200_000, np.uint32)
    x[:] = np.arange(200_000, dtype=np.uint32)
    fake.pinned.add(x.ctypes.data)
    pipe = StreamPipeline(FakeMix(), streams=3, chunk=10_000)
    y = pipe.run(x)
    assert pipe.stats.pinned["allocations"] == 1 and pipe.stats.pinned["allocated_bytes"] >= x.nbytes
    np.testing.assert_array_equal(y, reference(x, 2))
    fake.pinned.add(y.ctypes.data)  # the driver knows pool memory is pinned; the fake is told
    pipe.run(x, out=y)  # out=: nothing to pin
    assert pipe.stats.pinned["allocated_bytes"] == 0
    del y  # the previous output goes back to the pool
    y = pipe.run(x)
    assert pipe.stats.pinned["allocated_bytes"] == 0 and pipe.stats.pinned["reuses"] == 1
    np.testing.assert_array_equal(y, reference(x, 2))


def test_ring_slots_come_from_the_pool_and_a_new_pipeline_reuses_them(fake):
    x = np.arange(200_000, dtype=np.uint32)
    with StreamPipeline(FakeMix(), streams=2, chunk=10_000, slots=3) as pipe:
        pipe.run(x)
        assert pipe.stats.pinned["allocations"] == 6  # 3 slots each way
        pipe.run(x)
        assert pipe.stats.pinned["allocated_bytes"] == 0 and pipe.stats.pinned["reuses"] == 0
    with StreamPipeline(FakeMix(), streams=2, chunk=10_000, slots=3) as again:
        np.testing.assert_array_equal(again.run(x), reference(x, 2))
        assert again.stats.pinned["allocated_bytes"] == 0 and again.stats.pinned["reuses"] == 6


def test_pinned_pool_passed_in_is_used(fake):
    from fullpipe.cuda.pinned_pool import PinnedPool

    own = PinnedPool(64 * MiB)
    x = np.arange(50_000, dtype=np.uint32)
    with StreamPipeline(FakeMix(), streams=2, chunk=5000, pinned_pool=own) as pipe:
        pipe.run(x)
        assert own.stats.in_use_bytes > 0  # the ring holds its slots
    assert own.stats.in_use_bytes == 0  # close() gave them back


# --------------------------------------------------------------------------- torch CPU tensors
def test_torch_cpu_tensors_in_and_out(fake):
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(np.random.default_rng(3).integers(0, 2**32, 30_000, dtype=np.uint32))
    pipe = StreamPipeline(FakeMix(), streams=3, chunk=1000)
    y = pipe.run(x)
    assert isinstance(y, torch.Tensor) and y.dtype == x.dtype and y.shape == x.shape
    np.testing.assert_array_equal(y.numpy(), reference(x.numpy(), 2))
    out = torch.zeros_like(x)
    assert pipe.run(x, out=out) is out
    np.testing.assert_array_equal(out.numpy(), reference(x.numpy(), 2))
    parts = [x[:1000], x[1000:1500], x[1500:4000]]
    ys = pipe.run_batches(parts)
    assert all(isinstance(t, torch.Tensor) for t in ys)
    np.testing.assert_array_equal(ys[2].numpy(), reference(parts[2].numpy(), 2))
    _assert_clean(pipe)


def test_run_batches_of_pinned_inputs_get_pinned_outputs_from_the_pool(fake):
    from fullpipe.cuda.pinned_pool import default_pinned_pool

    pool = default_pinned_pool()
    xs = [pool.empty(n, np.uint32) for n in (1000, 2500, 700)]
    for i, x in enumerate(xs):
        x[:] = np.arange(len(x), dtype=np.uint32) * (i + 1)
        fake.pinned.add(x.ctypes.data)
    pipe = StreamPipeline(FakeMix(), streams=2)
    ys = pipe.run_batches(xs)
    # one block for the run's outputs, not one per batch; each output 256-byte aligned in it
    assert pipe.stats.pinned["allocations"] == 1 and pipe.stats.staging["input"] == "direct"
    addrs = [y.ctypes.data for y in ys]
    assert all((a - addrs[0]) % 256 == 0 for a in addrs) and addrs[2] - addrs[0] < 5 * 4096
    for x, y in zip(xs, ys):
        np.testing.assert_array_equal(y, reference(x, 2))
    del y, ys
    gc.collect()
    pipe.run_batches(xs)  # the block went back when the last output did: taken again, nothing pinned
    assert pipe.stats.pinned["allocations"] == 0 and pipe.stats.pinned["reuses"] == 1


def test_a_full_pinned_pool_makes_the_output_pageable_and_says_so(fake):
    """A pinned input gets a pinned output from the pool; when the pool cannot hold it the
    output is pageable (the D2H into it is synchronous): a PipelineWarning says so, and
    the stats record it. The result is still right."""
    from fullpipe.cuda.pinned_pool import PinnedPool

    from fullpipe.pipeline import PipelineWarning

    x = np.arange(1_000_000, dtype=np.uint32)
    fake.pinned.add(x.ctypes.data)
    small = PinnedPool(2 * MiB)  # room for the ring's slots, not for the 4 MB output
    with StreamPipeline(FakeMix(), streams=2, chunk=50_000, pinned_pool=small) as pipe:
        with pytest.warns(PipelineWarning, match="pinned pool full") as caught:
            y = pipe.run(x)
        assert caught[0].filename == __file__  # pointed at the caller's line
        assert "pinned pool full" in pipe.stats.pinned["fallback"]
    np.testing.assert_array_equal(y, reference(x, 2))
