"""GPU tests of the stream pipeline: bit-exact results on fresh random data with
poisoned outputs, every staging and recycle mode, torch/cupy computes, chunk="auto",
the stats, and the failure path (nothing leaks)."""

from __future__ import annotations

import numpy as np
import pytest

from fullpipe.cuda import driver as drv
from fullpipe.cuda import hostfn
from fullpipe.cuda.interop import cupy_stream, torch_stream
from fullpipe.cuda.memory import is_pinned, pinned_empty
from fullpipe.errors import CudaError
from fullpipe.pipeline import StreamPipeline
from fullpipe.pipeline.workload import MixKernel, reference

pytestmark = pytest.mark.gpu
POISON = 0xDEADBEEF
MiB = 1 << 20


def _random(n, seed=0, pinned=False):
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 2**32, n, dtype=np.uint32)
    if not pinned:
        return data
    x = pinned_empty(n, np.uint32)
    x[:] = data
    return x


def _usage(pipe, pool):
    s = pool.stats()
    r = pipe.resources()
    return (s.used_bytes, s.allocations, r["timing_events_out"], r["pinned_slots_free"], r["running"],
            hostfn.pending_count())


@pytest.mark.parametrize("pinned", [True, False])
def test_run_is_bit_exact(device, mix, own_pool, pinned):
    x = _random(10 * MiB // 4 + 3, seed=1, pinned=pinned)
    y = pinned_empty(x.shape, np.uint32) if pinned else np.empty_like(x)
    y.fill(POISON)
    with StreamPipeline(mix, streams=3, chunk="1MiB", pool=own_pool, device=device) as pipe:
        out = pipe.run(x, out=y)
        assert out is y
        np.testing.assert_array_equal(y, reference(x, mix.rounds))
        want = "direct" if pinned else "bulk"  # 11 pageable batches of 1 MiB: in bulk (pipeline/bulk.py)
        assert pipe.stats.staging == {"input": want, "output": want}
        assert pipe.stats.batches == 11


@pytest.mark.parametrize("recycle", ["hostfn", "pyhostfn", "event"])
@pytest.mark.parametrize("slots", [1, 3])
def test_ring_modes_bit_exact(device, mix, own_pool, recycle, slots):
    x = _random(3 * MiB, seed=2)
    with StreamPipeline(mix, streams=3, chunk=100_003, slots=slots, recycle=recycle, pool=own_pool,
                        device=device, staging="ring") as pipe:
        y = pipe.run(x)
        np.testing.assert_array_equal(y, reference(x, mix.rounds))
        assert pipe.stats.recycle == recycle


@pytest.mark.parametrize("pinned", [True, False])
@pytest.mark.parametrize("streams", [1, 3])
def test_copy_streams_bit_exact_and_nothing_leaks(device, mix, own_pool, pinned, streams):
    """copy_streams=True: H2D on one stream, D2H on another, compute on N; each buffer freed on
    the H2D stream `lag` batches later, behind an event recorded after its D2H."""
    x = _random(6 * MiB + 5, seed=4, pinned=pinned)
    y = pinned_empty(x.shape, np.uint32) if pinned else np.empty_like(x)
    with StreamPipeline(mix, streams=streams, chunk=262_147, copy_streams=True, pool=own_pool,
                        device=device) as pipe:
        pipe.run(x, out=y)  # warm
        start = _usage(pipe, own_pool)
        own_pool.reset_high_water_marks()
        for _ in range(3):
            y.fill(POISON)
            pipe.run(x, out=y)
            np.testing.assert_array_equal(y, reference(x, mix.rounds))
        assert _usage(pipe, own_pool) == start
        # Buffers are freed on the H2D stream `lag` batches later: memory stays bounded
        # although the host enqueues the whole run ahead of the GPU.
        batch_bytes = 2 * 262_147 * 4 + 256
        assert own_pool.stats().used_high_bytes <= (pipe._lag + 2) * batch_bytes + (4 << 20)
        assert set(pipe.stats.busy_ms) == {"h2d", "compute", "d2h"}


def test_ten_thousand_random_batches_bit_exact_and_nothing_leaks(device, mix, own_pool):
    rng = np.random.default_rng(3)
    sizes = rng.integers(1, 16_384, 10_000)
    batches = [rng.integers(0, 2**32, int(k), dtype=np.uint32) for k in sizes]
    outs = [np.full(int(k), POISON, np.uint32) for k in sizes]
    with StreamPipeline(mix, streams=4, slots=3, pool=own_pool, device=device) as pipe:
        pipe.run_batches(batches[:10], outs=outs[:10])  # pool and ring warm
        own_pool_start = _usage(pipe, own_pool)
        pipe.run_batches(batches, outs=outs)
        for b, o in zip(batches, outs):
            assert np.array_equal(o, reference(b, mix.rounds))
        assert _usage(pipe, own_pool) == own_pool_start
        print(pipe.stats)
        assert pipe.stats.batches == 10_000


def test_identity_and_sink(device, own_pool):
    x = _random(4 * MiB, seed=4)
    with StreamPipeline(None, streams=2, chunk="1MiB", pool=own_pool, device=device) as pipe:
        np.testing.assert_array_equal(pipe.run(x), x)
    with StreamPipeline(None, streams=2, chunk="1MiB", output=None, pool=own_pool, device=device) as pipe:
        assert pipe.run(x) is None and set(pipe.stats.busy_ms) == {"h2d"}


def test_pinned_input_gives_pinned_output(device, mix, own_pool):
    x = _random(MiB, seed=5, pinned=True)
    with StreamPipeline(mix, streams=2, chunk=65536, pool=own_pool, device=device) as pipe:
        y = pipe.run(x)
    assert is_pinned(y)
    np.testing.assert_array_equal(y, reference(x, mix.rounds))


def test_torch_compute_zero_copy(device, own_pool):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")

    def compute(stream, x, y):
        with torch.cuda.stream(torch_stream(stream)):
            tx = torch.as_tensor(x, device="cuda")
            ty = torch.as_tensor(y, device="cuda")
            assert tx.data_ptr() == x.ptr and ty.data_ptr() == y.ptr  # no copies
            torch.mul(tx, 2.0, out=ty)
            ty.add_(1.0)

    x = np.random.default_rng(6).random((4096, 64), dtype=np.float32)
    with StreamPipeline(compute, streams=3, chunk=500, pool=own_pool, device=device) as pipe:
        y = pipe.run(x)
    np.testing.assert_array_equal(y, x * 2.0 + 1.0)


def test_cupy_compute_zero_copy(device, own_pool):
    cp = pytest.importorskip("cupy")

    def compute(stream, x, y):
        with cupy_stream(stream):
            cx, cy = cp.asarray(x), cp.asarray(y)
            assert cx.data.ptr == x.ptr
            cp.sqrt(cx, out=cy)

    x = np.random.default_rng(7).random(1_000_000).astype(np.float64)
    with StreamPipeline(compute, streams=3, chunk=123_457, pool=own_pool, device=device) as pipe:
        y = pipe.run(x)
    np.testing.assert_array_equal(y, np.sqrt(x))


def test_other_output_shape(device, own_pool):
    cp = pytest.importorskip("cupy")

    def row_sums(stream, x, y):
        with cupy_stream(stream):
            cp.sum(cp.asarray(x), axis=1, out=cp.asarray(y))

    x = np.random.default_rng(8).integers(0, 1000, (10_000, 32)).astype(np.int64)
    with StreamPipeline(row_sums, streams=2, chunk=999, output=((), np.int64), pool=own_pool,
                        device=device) as pipe:
        y = pipe.run(x)
    np.testing.assert_array_equal(y, x.sum(axis=1))


def test_chunk_auto_chooses_and_explains(device, mix, own_pool):
    x = _random(64 * MiB // 4, seed=9, pinned=True)
    with StreamPipeline(mix, streams=3, chunk="auto", pool=own_pool, device=device) as pipe:
        y = pipe.run(x)
        np.testing.assert_array_equal(y[:1_000_000], reference(x[:1_000_000], mix.rounds))
        np.testing.assert_array_equal(y[-1_000_000:], reference(x[-1_000_000:], mix.rounds))
        c = pipe.stats.chunk
        print(c["reason"])
        assert c["probe_batches"] == 3 and c["rows"] >= 1 and "bound by" in c["reason"]


def test_stats_show_overlap(device, own_pool):
    mix = MixKernel(device, rounds=64)
    x = _random(128 * MiB // 4, seed=10, pinned=True)
    y = pinned_empty(x.shape, np.uint32)
    with StreamPipeline(mix, streams=3, chunk="8MiB", pool=own_pool, device=device) as pipe:
        pipe.run(x, out=y)
        pipe.run(x, out=y)
        st = pipe.stats
    print(st)
    assert set(st.busy_ms) == {"h2d", "compute", "d2h"}
    assert st.ratio_to_bound <= 1.0 + 1e-6 and st.overlap > 1.3
    assert st.gpu_span_ms <= st.wall_ms + 1e-3


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
@pytest.mark.parametrize("recycle", ["hostfn", "event"])
def test_exception_in_compute_drains_and_nothing_leaks(device, mix, own_pool, exc, recycle):
    calls = {"n": 0}

    def compute(stream, x, y):
        if calls["n"] == 7:
            calls["n"] += 1
            raise exc("boom")
        calls["n"] += 1
        mix(stream, x, y)

    compute.input_dtype = np.uint32
    x = _random(2 * MiB, seed=11)
    with StreamPipeline(compute, streams=3, chunk=65536, slots=3, recycle=recycle, pool=own_pool,
                        device=device) as pipe:
        pipe.run(x[:65536])
        before = _usage(pipe, own_pool)
        calls["n"] = 0  # count the batches of the next run only: batch 7 raises
        with pytest.raises(exc) as info:
            pipe.run(x)
        assert info.value.batch_index == 7
        for s in pipe.streams:
            s.sync()
        assert _usage(pipe, own_pool) == before
        y = pipe.run(x)  # usable again
        np.testing.assert_array_equal(y, reference(x, mix.rounds))


def test_cuda_error_in_compute_is_reported_with_batch(device, own_pool):
    def bad(stream, x, y):
        # A null destination: CUDA_ERROR_INVALID_VALUE, raised at the call (not sticky).
        drv.call("cuMemsetD8Async", 0, 0, 16, stream.handle)

    with StreamPipeline(bad, streams=2, chunk=1000, pool=own_pool, device=device) as pipe:
        before = own_pool.stats()
        with pytest.raises(CudaError) as info:
            pipe.run(np.ones(5000, np.float32))
        assert info.value.batch_index == 0
        for s in pipe.streams:
            s.sync()
        after = own_pool.stats()
        assert (after.used_bytes, after.allocations) == (before.used_bytes, before.allocations)


def test_mix_kernel_checks_new_arrays_and_reuses_its_checks(device, own_pool):
    """MixKernel checks each new (x, y) pair once (the pipeline hands a lane the same views
    batch after batch) and still refuses bad arrays, whichever came before them."""
    from fullpipe.cuda.hotpath import HotPath, handle_int
    from fullpipe.cuda.memory import DeviceArray
    from fullpipe.cuda.streams import create_stream

    mix, hot = MixKernel(device, rounds=2), HotPath()
    s = create_stream(device)
    x = own_pool.empty(4096, np.uint32, s)
    y = own_pool.empty(4096, np.uint32, s)
    zero = pinned_empty(4096, np.uint32)
    zero[:] = 0
    hot.memcpy_htod(x.ptr, zero.ctypes.data, zero.nbytes, handle_int(s))
    for _ in range(3):
        mix(s, x, y)
    out = pinned_empty(4096, np.uint32)
    hot.memcpy_dtoh(out.ctypes.data, y.ptr, out.nbytes, handle_int(s))
    s.sync()
    np.testing.assert_array_equal(out, reference(zero, 2))
    short = own_pool.empty(1024, np.uint32, s)
    with pytest.raises(ValueError, match="of one size"):
        mix(s, x, short)
    with pytest.raises(ValueError, match="16-byte aligned"):
        mix(s, DeviceArray(x.ptr + 4, (1024,), np.uint32), DeviceArray(y.ptr, (1024,), np.uint32))
    with pytest.raises(ValueError, match="output='same'"):
        mix(s, x, None)
    s.sync()


def test_enqueue_only_driver_calls_keep_the_gil_and_pageable_copies_let_it_go(device, own_pool):
    """The hot path's event records and copies with page-locked memory do not hand the GIL
    to a thread that wants it (with compute threads, taking it back waited behind their
    calls: hotpath.py); a copy of pageable memory, which may wait for the device, does."""
    import sys
    import threading
    import time

    from fullpipe.cuda.events import create_event
    from fullpipe.cuda.hotpath import HotPath, handle_int
    from fullpipe.cuda.streams import create_stream

    nbytes = 4 * MiB  # (a pageable copy this size takes long enough for the other thread to wake and take the GIL)
    hot, s, event = HotPath(), create_stream(device), create_event(device)  # (held: the handles are theirs)
    h, ev = handle_int(s), handle_int(event)
    pinned, pageable = pinned_empty(nbytes, np.uint8), np.zeros(nbytes, np.uint8)
    dev = own_pool.empty(nbytes, np.uint8, s)
    turns, stop = [0], threading.Event()

    def wants_the_gil() -> None:  # (runs Python whenever it holds the GIL)
        while not stop.is_set():
            turns[0] += 1

    def turns_during(call) -> int:
        before = turns[0]
        for _ in range(20):
            call()
        return turns[0] - before

    saved = sys.getswitchinterval()
    spinner = threading.Thread(target=wants_the_gil, daemon=True)
    try:
        # the spinner asks for the GIL only after this interval: 40 calls that keep it take far less
        sys.setswitchinterval(0.05)
        spinner.start()
        time.sleep(0.01)
        kept = turns_during(lambda: hot.event_record(ev, h))
        kept += turns_during(lambda: hot.memcpy_htod(dev.ptr, pinned.ctypes.data, nbytes, h, pinned=True))
        s.sync()
        sys.setswitchinterval(0.002)  # (each hand-over then costs this thread 2 ms, not 50)
        let_go = turns_during(lambda: hot.memcpy_htod(dev.ptr, pageable.ctypes.data, nbytes, h))
    finally:
        stop.set()
        spinner.join()
        sys.setswitchinterval(saved)
    s.sync()
    assert kept == 0
    assert let_go > 0
