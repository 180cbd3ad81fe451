"""GPU tests of the pinned host pool: its buffers are really pinned (async copies run
from them, exactly), steady state pins nothing, threads without a context can use it,
and trim/close give the memory back."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

from fullpipe.cuda.memory import copy_d2h, copy_h2d, is_pinned
from fullpipe.cuda.pinned_pool import PinnedPool, PinnedUsage, default_pinned_pool
from fullpipe.cuda.pool import DevicePool
from fullpipe.cuda.streams import create_stream

pytestmark = pytest.mark.gpu
MiB = 1 << 20
POISON = 0xDEADBEEF


@pytest.fixture
def dpool(device):
    p = DevicePool(device, release_threshold="max")
    yield p
    p.close()


def roundtrip(pool, dpool, stream, n, seed, usage=None):
    """x (pinned, from the pool) -> device -> y (pinned, from the pool); exact check."""
    rng = np.random.default_rng(seed)
    x = pool.empty(n, np.uint32, usage)
    x[:] = rng.integers(0, 2**32, n, dtype=np.uint32)
    y = pool.empty(n, np.uint32, usage)
    y.fill(POISON)
    d = dpool.allocate_ptr(n * 4, stream)
    copy_h2d(d, x, stream)
    copy_d2h(y, d, stream)
    dpool.free_ptr(d, stream)
    stream.sync()
    np.testing.assert_array_equal(y, x)
    return is_pinned(x) and is_pinned(y)


def test_buffers_are_pinned_and_copies_from_them_are_exact(device, dpool):
    pool = PinnedPool(256 * MiB, device)
    s = create_stream(device)
    assert roundtrip(pool, dpool, s, 3 * MiB + 7, seed=1)
    with pool.take(5 * MiB) as block:
        a = block.array(5 * MiB // 4, np.float32)
        assert is_pinned(a)
    s.close()
    pool.close()


def test_steady_state_runs_pin_nothing(device, dpool):
    pool = PinnedPool(256 * MiB, device)
    s = create_stream(device)
    per_run = []
    for run in range(5):
        usage = PinnedUsage()
        assert roundtrip(pool, dpool, s, 2 * MiB - 1000 * run, seed=run, usage=usage)  # sizes vary a little
        gc.collect()  # the run's arrays are gone: their buffers are back
        per_run.append(usage.allocated_bytes)
        assert usage.allocations + usage.reuses == 2
    assert per_run[0] == 2 * 8 * MiB and per_run[1:] == [0, 0, 0, 0], per_run
    assert pool.stats.allocated_bytes == 2 * 8 * MiB
    s.close()
    pool.close()


def test_threads_without_a_context_share_the_pool(device, dpool):
    pool = PinnedPool(512 * MiB, device)
    errors = []

    def worker(tid):
        try:
            s = create_stream(device)
            for it in range(10):
                roundtrip(pool, dpool, s, int(np.random.default_rng(tid).integers(1, 2 * MiB)), seed=tid * 100 + it)
            s.close()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[0]
    gc.collect()
    st = pool.stats
    assert st.in_use_bytes == 0 and st.reuses > st.allocations
    assert pool.trim(0) == st.held_bytes and pool.stats.held_bytes == 0
    pool.close()


def test_pool_output_feeds_a_pipeline_directly(device, dpool):
    """A pipeline given pinned arrays from the pool copies straight from/to them."""
    from fullpipe import StreamPipeline
    from fullpipe.pipeline.workload import MixKernel, reference

    pool = PinnedPool(256 * MiB, device)
    mix = MixKernel(device, rounds=2)
    n = 1_000_003
    with StreamPipeline(mix, streams=3, chunk="512KiB", pool=dpool, device=device) as pipe:
        for run in range(3):
            x = pool.empty(n, np.uint32)
            x[:] = np.random.default_rng(run).integers(0, 2**32, n, dtype=np.uint32)
            y = pool.empty(n, np.uint32)
            y.fill(POISON)
            assert is_pinned(x) and is_pinned(y)  # so the pipeline copies straight from/to them
            pipe.run(x, out=y)
            np.testing.assert_array_equal(y, reference(x, mix.rounds))
            del x, y
            gc.collect()
    assert pool.stats.allocations == 2  # run 1 pinned an input and an output; later runs reused them
    pool.close()


def test_default_pool_is_shared_and_real(device, dpool):
    pool = default_pinned_pool()
    assert pool is default_pinned_pool()
    s = create_stream(device)
    assert roundtrip(pool, dpool, s, 100_000, seed=9)
    s.close()
