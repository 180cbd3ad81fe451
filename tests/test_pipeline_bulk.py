"""Small pageable batches staged in bulk (pipeline/bulk.py), against the fake drivers:
the input copied into one pinned block before the first batch, the outputs D2H'd into
one and copied into the caller's arrays as their batches finish (the rest after the
last); no ring slot, no slot signal per batch. Outputs exact under the fake streams' jitter; the blocks go back to the
pinned pool (reused by the next run); too much in total, an output not known before
the compute, or a full pinned pool: the ring, as before."""

from __future__ import annotations

import ctypes
import itertools
import threading
import time

import numpy as np
import pytest

import fullpipe.pipeline.executor as fexec
from fullpipe.cuda.pinned_pool import default_pinned_pool
from fullpipe.pipeline import StreamPipeline, bulk, pageable
from fullpipe.pipeline.workload import reference
from tests.test_pipeline_fakecuda import FakeMix, _assert_clean, fake  # noqa: F401 - fixture
from tests.test_pipeline_tensors import FakeTensor, RowStats, _current, fakefw, want  # noqa: F401 - fixture


def batches(n=120, seed=0, most=3000):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 2**32, int(rng.integers(1, most)), dtype=np.uint32) for _ in range(n)]


def count_host_functions(fake, monkeypatch):
    calls = itertools.count()
    real = type(fake.driver).cuLaunchHostFunc
    monkeypatch.setattr(type(fake.driver), "cuLaunchHostFunc",
                        lambda self, *a: (next(calls), real(self, *a))[1])
    return calls


def test_small_pageable_batches_go_in_bulk_with_no_signal_per_batch(fake, monkeypatch):
    signals = count_host_functions(fake, monkeypatch)
    xs = batches()
    pipe = StreamPipeline(FakeMix(), streams=3, slots=3)
    for run in range(2):
        outs = pipe.run_batches(xs)
        for x, y in zip(xs, outs):
            np.testing.assert_array_equal(y, reference(x, 2))
        st = pipe.stats
        assert st.staging == {"input": "bulk", "output": "bulk"} and st.host_copies == {}
        if run == 1:  # the second run's blocks are the first run's, back from the pool
            assert st.pinned["allocated_bytes"] == 0
        _assert_clean(pipe)
    assert next(signals) == 0  # no host function: nothing waits on a slot
    assert default_pinned_pool().stats.in_use_bytes == 0


def test_a_tensor_function_with_outs_goes_in_bulk_both_ways(fake, fakefw):
    rng = np.random.default_rng(1)
    xs = [rng.random((int(rng.integers(1, 300)), 5), dtype=np.float32) for _ in range(40)]
    outs = [np.full((len(x), 2), np.nan) for x in xs]
    pipe = StreamPipeline(RowStats(), form="torch", streams=3)
    assert pipe.run_batches(xs, outs=outs) is not None
    for x, y in zip(xs, outs):
        np.testing.assert_allclose(y, want(x), rtol=1e-6)
    assert pipe.stats.staging == {"input": "bulk", "output": "bulk"}
    # without outs= each output is made from its y, and given its place in a pinned block
    # then: the earlier run showed how big the output rows are, and they are small
    ys = pipe.run_batches(xs)
    for x, y in zip(xs, ys):
        np.testing.assert_allclose(y, want(x), rtol=1e-6)
        assert isinstance(y, np.ndarray) and not pipe._pinned(y)  # pageable in, pageable out
    assert pipe.stats.staging == {"input": "bulk", "output": "bulk"}
    _assert_clean(pipe)
    assert default_pinned_pool().stats.in_use_bytes == 0


def test_outputs_made_from_y_go_in_bulk_once_a_run_showed_they_are_small(fake, fakefw, monkeypatch):
    """Small inputs may have large outputs (token ids in, logits out): the first run of a
    compute without outs= stages its outputs through the ring; later runs put them in a
    pinned block when the rows seen so far fit it, and never when they do not."""
    rng = np.random.default_rng(2)
    xs = [rng.random((int(rng.integers(1, 300)), 5), dtype=np.float32) for _ in range(40)]
    pipe = StreamPipeline(RowStats(), form="torch", streams=3)
    for staged in ("ring", "bulk", "bulk"):
        ys = pipe.run_batches(xs)
        assert pipe.stats.staging == {"input": "bulk", "output": staged}
        for x, y in zip(xs, ys):
            np.testing.assert_allclose(y, want(x), rtol=1e-6)
    _assert_clean(pipe)
    # the same outputs (16 bytes a row), but a block too small for them: the ring
    monkeypatch.setattr(bulk, "BULK_MAX_BYTES", sum(len(x) for x in xs) * 16 - 1)
    pipe.run_batches(xs)
    assert pipe.stats.staging["output"] == "ring"
    pipe.close()  # (the ring's slots are the pipeline's until then)
    assert default_pinned_pool().stats.in_use_bytes == 0


def test_outputs_made_from_y_whose_rows_outgrow_the_block_go_straight_to_their_arrays(fake, fakefw, monkeypatch):
    """The block for outputs made from y is sized from the first y's rows; a later batch
    with longer rows (e.g. another sequence length) that no longer fits is copied
    straight into its array: correct, only not asynchronous."""

    class Repeat:  # y: each row repeated k times, k growing with the batch (enqueued, as RowStats)
        def __init__(self):
            self.calls, self.outputs = 0, []

        def __call__(self, x):
            self.calls += 1
            k = self.calls
            y = FakeTensor.empty((x.shape[0], x.shape[1] * k), x.dtype)
            self.outputs.append(y)
            _current.stream.put(lambda: y.host().__setitem__(slice(None), np.tile(x.host(), (1, k))))
            return y

    places = []
    real = bulk.BulkStaging.place_output
    monkeypatch.setattr(bulk.BulkStaging, "place_output",
                        lambda self, dst, estimate, addr: places.append(real(self, dst, estimate, addr)) or places[-1])
    xs = [np.full((50, 1000), i, np.float32) for i in range(10)]  # 200 KB each
    pipe = StreamPipeline(Repeat(), form="torch", streams=2)
    pipe.run_batches(xs[:2])  # the first run: rows of 4 and 8 KB, through the ring
    assert pipe.stats.staging["output"] == "ring"
    ys = pipe.run_batches(xs)  # rows of 12 ... 48 KB; the block is sized for 10 x 50 rows of 12 KB
    for i, (x, y) in enumerate(zip(xs, ys)):
        np.testing.assert_array_equal(y, np.tile(x, (1, i + 3)))
    assert pipe.stats.staging["output"] == "bulk"
    assert places[0] != 0 and places[-1] == 0  # the first in the block, the last (2.4 MB) past its end
    _assert_clean(pipe)
    pipe.close()  # (the first run's ring slots are the pipeline's until then)
    assert default_pinned_pool().stats.in_use_bytes == 0


def test_too_much_in_total_or_in_one_batch_takes_the_ring(fake, monkeypatch):
    xs = batches(40)
    monkeypatch.setattr(bulk, "BULK_MAX_BYTES", sum(x.nbytes for x in xs) // 2)
    pipe = StreamPipeline(FakeMix(), streams=2)
    outs = pipe.run_batches(xs)
    assert pipe.stats.staging == {"input": "ring", "output": "ring"}
    np.testing.assert_array_equal(outs[-1], reference(xs[-1], 2))
    monkeypatch.setattr(bulk, "BULK_MAX_BYTES", 64 << 20)
    monkeypatch.setattr(fexec.pageable, "INLINE_MAX_BYTES", 4096)  # a batch bigger than "small"
    pipe.run_batches(xs)
    assert pipe.stats.staging == {"input": "ring", "output": "ring"}
    _assert_clean(pipe)


def test_staging_ring_asks_for_the_ring(fake):
    pipe = StreamPipeline(FakeMix(), streams=2, staging="ring")
    pipe.run_batches(batches(20))
    assert pipe.stats.staging == {"input": "ring", "output": "ring"}


def test_a_full_pinned_pool_falls_back_to_the_ring(fake):
    xs = batches(200)  # ~1.2 MB each way
    pool = default_pinned_pool()
    pool.cap_bytes = 512 << 10  # room for the ring's slots, not for the whole run in bulk
    pipe = StreamPipeline(FakeMix(), streams=3, slots=2)
    outs = pipe.run_batches(xs)
    for x, y in zip(xs, outs):
        np.testing.assert_array_equal(y, reference(x, 2))
    assert pipe.stats.staging == {"input": "ring", "output": "ring"}
    _assert_clean(pipe)


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_a_failure_gives_the_blocks_back(fake, exc):
    xs = batches(50)
    pipe = StreamPipeline(FakeMix(fail_at=20, exc=exc), streams=3)
    with pytest.raises(exc) as info:
        pipe.run_batches(xs)
    assert info.value.batch_index == 20
    _assert_clean(pipe)
    assert default_pinned_pool().stats.in_use_bytes == 0
    pipe.compute = FakeMix()
    outs = pipe.run_batches(xs)
    np.testing.assert_array_equal(outs[49], reference(xs[49], 2))
    assert pipe.stats.staging == {"input": "bulk", "output": "bulk"}


@pytest.mark.parametrize("timing", [True, "sampled"])
def test_bulk_outputs_of_finished_batches_are_copied_out_during_the_run_in_groups(fake, monkeypatch, timing):
    """The outputs of batches whose D2H is done go to the caller's arrays while later
    batches still run (not all after the last one): the copy overlaps the GPU's work.
    While batches are still being enqueued they go a group of at least DRAIN_GROUP_BYTES
    at a time, not one copier job per batch (each job wakes a thread that takes the GIL
    between the compute calls); once every batch is enqueued, each goes as its batch is
    done, copied by the enqueueing thread (which only waits for the GPU then) with the
    copier's threads. Sampled timing (the default) knows a batch is done from a later timed
    batch of its stream."""
    fake.jitter["value"] = 0.0
    xs = batches(200)  # ~1.2 MB of outputs
    outs = [np.zeros_like(x) for x in xs]
    monkeypatch.setattr(bulk, "DRAIN_GROUP_BYTES", 64 << 10)
    monkeypatch.setattr(bulk, "FIRST_INPUT_BYTES", 1 << 30)  # the inputs in one go: the copier's jobs are outputs
    jobs, tail_jobs = [], []
    real = fexec.HostCopier.submit_many
    real_finishing = fexec.StreamPipeline._drain_while_finishing

    def spy(self, copies):
        (tail_jobs if finishing else jobs).append(sum(n for _, _, n in copies))
        return real(self, copies)

    real_here, here = bulk.BulkStaging.drain_here, []

    def spy_here(self, done, copier):
        assert finishing and threading.current_thread() is threading.main_thread()
        here.append(sum(n for _, _, n in self.outputs[self._drained:done]))
        real_here(self, done, copier)

    def spy_finishing(self, run):
        nonlocal finishing
        finishing = True
        real_finishing(self, run)

    finishing = False
    monkeypatch.setattr(fexec.HostCopier, "submit_many", spy)
    monkeypatch.setattr(fexec.StreamPipeline, "_drain_while_finishing", spy_finishing)
    monkeypatch.setattr(bulk.BulkStaging, "drain_here", spy_here)

    class SlowCall(FakeMix):  # a compute call that takes host time (the fake streams run meanwhile)
        def __call__(self, stream, x, y):
            super().__call__(stream, x, y)
            time.sleep(2e-4)

    pipe = StreamPipeline(SlowCall(), streams=3, timing=timing)
    pipe.run_batches(xs, outs=outs)
    for x, y in zip(xs, outs):
        np.testing.assert_array_equal(y, reference(x, 2))
    st = pipe.stats
    assert st.staging["output"] == "bulk" and 0 < st.bulk_drained_early <= len(xs)
    assert f"{st.bulk_drained_early} of 200 copied out during the run" in str(st)
    assert jobs and all(n >= 64 << 10 for n in jobs) and len(jobs) <= sum(o.nbytes for o in outs) // (64 << 10)
    # the last batches are timed too: every output was on its way before the run's end
    assert finishing and not tail_jobs and any(here)
    assert st.bulk_drained_early == len(xs) and sum(jobs) + sum(here) == sum(o.nbytes for o in outs)
    _assert_clean(pipe)
    assert default_pinned_pool().stats.in_use_bytes == 0


def test_a_failed_bulk_run_waits_for_its_output_copies_and_gives_the_blocks_back(fake):
    xs = batches(60)
    outs = [np.zeros_like(x) for x in xs]
    pipe = StreamPipeline(FakeMix(fail_at=50), streams=3)
    with pytest.raises(RuntimeError) as info:
        pipe.run_batches(xs, outs=outs)
    assert info.value.batch_index == 50
    _assert_clean(pipe)
    assert default_pinned_pool().stats.in_use_bytes == 0
    done = [i for i, (x, y) in enumerate(zip(xs, outs)) if np.array_equal(y, reference(x, 2))]
    assert done == list(range(len(done))) and len(done) < 50  # copied in order, nothing past the failure


def test_bulk_input_groups_cover_every_batch_in_order():
    """The input block is filled in groups: the first at least FIRST_INPUT_BYTES, the
    others at least INPUT_GROUP_BYTES, consecutive, every batch in exactly one."""
    rng = np.random.default_rng(5)
    for _ in range(200):
        sizes = [int(n) for n in rng.integers(1, 400_000, size=int(rng.integers(1, 60)))]
        groups = bulk._groups(sizes, 256 << 10, 1 << 20)
        assert groups[0][0] == 0 and groups[-1][1] == len(sizes)
        assert all(a < b for a, b in groups) and all(b == c for (_, b), (c, _) in zip(groups, groups[1:]))
        want = ([256 << 10] + [1 << 20] * len(groups))[:len(groups) - 1]
        assert all(sum(sizes[a:b]) >= w for (a, b), w in zip(groups, want))  # every group but the last is full


def test_bulk_inputs_are_copied_in_groups_ahead_of_their_batches(fake, monkeypatch):
    """Only the first group is copied before the first H2D; the others on the copier's
    threads, each waited for before the first batch that reads it. The outputs are
    bit-exact, and a slow copy of a later group holds back only the batches after it."""
    monkeypatch.setattr(bulk, "FIRST_INPUT_BYTES", 16 << 10)
    monkeypatch.setattr(bulk, "INPUT_GROUP_BYTES", 64 << 10)
    xs = batches(120)
    real_submit = fexec.HostCopier.submit_many
    started = []

    def slow_submit(self, copies):
        def later():
            time.sleep(0.02)  # a later group arrives late: its batches must wait for it
            pageable._copy_each(copies)
        started.append(len(copies))
        return [self._pool.submit(later)] if self._pool is not None else real_submit(self, copies)

    monkeypatch.setattr(fexec.HostCopier, "submit_many", slow_submit)
    pipe = StreamPipeline(FakeMix(), streams=3, copy_threads=2, timing=False)
    outs = pipe.run_batches(xs)
    for x, y in zip(xs, outs):
        np.testing.assert_array_equal(y, reference(x, 2))
    assert pipe.stats.staging["input"] == "bulk" and len(started) >= 2
    _assert_clean(pipe)
    assert default_pinned_pool().stats.in_use_bytes == 0


def count_slow_h2ds(fake, monkeypatch):
    """Count the H2Ds, each made slow on its stream: a stream that does not wait for it reads too early."""
    calls = itertools.count()
    real = type(fake.driver).cuMemcpyHtoDAsync

    def slow(self, dst, src, n, stream):
        next(calls)
        stream.put(lambda: time.sleep(0.003))
        return real(self, dst, src, n, stream)

    monkeypatch.setattr(type(fake.driver), "cuMemcpyHtoDAsync", slow)
    return calls


@pytest.mark.parametrize("form", ["stream", "tensor"])
def test_bulk_inputs_go_to_the_gpu_one_copy_per_group(fake, fakefw, monkeypatch, form):
    """The input block goes to the GPU a group at a time (bulk.DeviceInputs): one H2D per
    group, on a stream of its own, which every lane's stream waits for.
    Outputs exact under the fake streams' jitter, with the later groups' host copies late;
    the device block goes back to the pool. The stream form still gets an output region
    per batch (its lane buffer); a tensor function's x is cut from one tensor."""
    monkeypatch.setattr(bulk, "FIRST_INPUT_BYTES", 16 << 10)
    monkeypatch.setattr(bulk, "INPUT_GROUP_BYTES", 64 << 10)
    real_submit = fexec.HostCopier.submit_many

    def late_submit(self, copies):
        def later():
            time.sleep(0.01)
            pageable._copy_each(copies)
        return [self._pool.submit(later)] if self._pool is not None else real_submit(self, copies)

    monkeypatch.setattr(fexec.HostCopier, "submit_many", late_submit)
    h2ds = count_slow_h2ds(fake, monkeypatch)
    if form == "stream":
        xs = batches(90)
        pipe = StreamPipeline(FakeMix(), streams=3, copy_threads=2)
        outs = pipe.run_batches(xs)
        for x, y in zip(xs, outs):
            np.testing.assert_array_equal(y, reference(x, 2))
    else:
        rng = np.random.default_rng(3)
        xs = [rng.random((int(rng.integers(1, 900)), 5), dtype=np.float32) for _ in range(90)]
        outs = [np.full((len(x), 2), np.nan) for x in xs]
        pipe = StreamPipeline(RowStats(), form="torch", streams=3, copy_threads=2)
        pipe.run_batches(xs, outs=outs)
        for x, y in zip(xs, outs):
            np.testing.assert_allclose(y, want(x), rtol=1e-6)
        assert fakefw[-1].cuts == len(xs)  # every x cut from one tensor, none made from an address
    groups = bulk._groups([x.nbytes for x in xs], 16 << 10, 64 << 10)
    st = pipe.stats
    assert st.staging["input"] == "bulk" and len(groups) >= 4
    assert st.bulk_uploads == len(groups) == next(h2ds)
    assert "bulk inputs: on the GPU in" in str(st)
    _assert_clean(pipe)
    assert default_pinned_pool().stats.in_use_bytes == 0


def test_a_list_done_again_after_its_compute_turned_serial_is_staged_from_the_callers_arrays(fake, fakefw):
    """A compute whose output overlaps one still being copied out turns serial and the run
    is done again (pipeline/tensors.py). Its batches had been pointed at the first try's
    pinned block, given back to the pool since: the second try stages them from the
    caller's arrays again (the blocks handed out in between hold other data)."""
    from fullpipe.pipeline.executor import PipelineWarning
    from tests.test_pipeline_tensors import OneBuffer

    rng = np.random.default_rng(53)
    xs = [rng.random((100, 4), dtype=np.float32) for _ in range(12)]  # (one shape: OneBuffer's one buffer)
    f = OneBuffer()
    pipe = StreamPipeline(f, form="torch", streams=3)
    real_take = default_pinned_pool().take

    def scribbled(*a, **k):  # (each block handed out full of other data, as a reused block would be)
        block = real_take(*a, **k)
        np.frombuffer((ctypes.c_char * block.nbytes).from_address(block.ptr), np.uint8)[:] = 0xAB
        return block

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(default_pinned_pool(), "take", scribbled)
        with pytest.warns(PipelineWarning, match="one after another"):
            ys = pipe.run_batches(xs)
    assert pipe.stats.staging["input"] == "bulk"
    for a, b in zip(xs, ys):
        np.testing.assert_array_equal(b, a * 2 + 1)
    _assert_clean(pipe)


@pytest.mark.parametrize("case", ["ring", "bulk", "direct", "staging-ring", "staging-direct"])
def test_a_copy_marked_pinned_is_page_locked(fake, monkeypatch, case):
    """The protocol marks a copy pinned, and its driver call then keeps the GIL
    (cuda/hotpath.py), only where the host range is page-locked: every H2D source and
    D2H destination so marked lies inside one pinned allocation (ring slots, bulk blocks,
    pool outputs) or a pinned array, whatever the staging; a pageable array handed over
    as is (staging="direct") is not marked."""
    from fullpipe.cuda.hotpath import HotPath

    rng = np.random.default_rng(53)
    pinned_arrays: list[np.ndarray] = []

    def inside_pinned(at: int, n: int) -> bool:
        ranges = [(a, len(buf)) for a, buf in fake.driver.host_allocs.items()]
        ranges += [(a.ctypes.data, a.nbytes) for a in pinned_arrays]
        return any(lo <= at and at + n <= lo + size for lo, size in ranges)

    marked: list[tuple[str, int, int, bool]] = []
    real_htod, real_dtoh = HotPath.memcpy_htod, HotPath.memcpy_dtoh

    def htod(self, dst, src, n, stream, pinned=False):
        marked.append(("H2D", src, n, pinned))
        return real_htod(self, dst, src, n, stream, pinned)

    def dtoh(self, dst, src, n, stream, pinned=False):
        marked.append(("D2H", dst, n, pinned))
        return real_dtoh(self, dst, src, n, stream, pinned)

    monkeypatch.setattr(HotPath, "memcpy_htod", htod)
    monkeypatch.setattr(HotPath, "memcpy_dtoh", dtoh)
    monkeypatch.setattr(HotPath, "host_pinned", lambda self, ptr: inside_pinned(ptr, 1))

    def pin(a: np.ndarray) -> np.ndarray:
        pinned_arrays.append(a)
        fake.pinned.add(a.ctypes.data)
        return a

    staging = {"staging-ring": "ring", "staging-direct": "direct"}.get(case, "auto")
    # (batches of 1.2 MB outside the bulk case: over pageable.INLINE_MAX_BYTES, so the ring's, not bulk)
    pipe = StreamPipeline(FakeMix(2), streams=3, chunk=300_000, staging=staging)
    if case == "bulk":
        xs = [rng.integers(0, 2**32, int(rng.integers(1, 3000)), dtype=np.uint32) for _ in range(120)]
        ys = pipe.run_batches(xs)
        for a, b in zip(xs, ys):
            np.testing.assert_array_equal(b, reference(a, 2))
    else:
        x = rng.integers(0, 2**32, 1_000_003, dtype=np.uint32)
        out = np.empty_like(x)
        if case in ("direct", "staging-ring"):
            x, out = pin(x), pin(out)
        np.testing.assert_array_equal(pipe.run(x, out=out), reference(x, 2))
    want_input = {"ring": "ring", "bulk": "bulk", "direct": "direct", "staging-ring": "ring",
                  "staging-direct": "direct"}[case]
    assert pipe.stats.staging["input"] == want_input
    wrong = [m for m in marked if m[3] and not inside_pinned(m[1], m[2])]
    assert not wrong
    assert any(m[3] for m in marked) == (case != "staging-direct")  # (pageable both ways there: none marked)
    _assert_clean(pipe)
