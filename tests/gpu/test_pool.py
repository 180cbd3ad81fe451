"""GPU tests of fullpipe's DevicePool: cross-stream reuse without device syncs, the
randomized multi-thread stress, statistics, release threshold, OOM, and interop."""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import pytest

from fullpipe.cuda import memory
from fullpipe.cuda.launch import launch
from fullpipe.cuda.pool import DevicePool
from fullpipe.cuda.streams import create_stream
from fullpipe.experiments import _alloc_common as common

pytestmark = pytest.mark.gpu

MiB = 1 << 20


@pytest.fixture(scope="module")
def aux(device):
    """A pool for the tests' own bookkeeping buffers (mismatch counters, stamps)."""
    return DevicePool(device, release_threshold="max")


def _counter(aux, stream, n=1):
    c = aux.empty(n, np.uint64, stream)
    memory.memset_d8(c.ptr, 0, c.nbytes, stream)
    stream.sync()
    return c


def test_randomized_stress_4_streams_2_threads_no_corruption_and_back_to_start(device, aux):
    """10,000 allocations of random sizes on 4 streams from 2 threads; every buffer is
    written with its own pattern and checked (on a random one of its thread's streams,
    after an event hand-off) before it is freed."""
    pool = DevicePool(device, release_threshold="max")
    streams = [create_stream(device) for _ in range(4)]
    counters = _counter(aux, streams[0], 2)
    common.kernels(device)
    start = pool.stats()
    per_thread = 5000
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            device.set_current()
            rng = np.random.default_rng(100 + t)
            mine = streams[2 * t: 2 * t + 2]
            counter_ptr = counters.ptr + 8 * t
            live: list[tuple] = []

            def retire(j: int) -> None:
                buf, n, tag, last = live.pop(j)
                s = mine[int(rng.integers(2))]
                if s is not last:
                    pool.hand_off(buf, last, s)  # the check and the free follow the write
                common.check_pattern(device, s, int(buf.handle), n, tag, counter_ptr)
                pool.free(buf, s)

            for i in range(per_thread):
                s = mine[int(rng.integers(2))]
                n = int(math.exp(rng.uniform(math.log(256), math.log(4 * MiB)))) // 4 * 4
                buf = pool.allocate(n, s)
                tag = (t << 24) | i
                common.fill_pattern(device, s, int(buf.handle), n, tag)
                live.append((buf, n, tag, s))
                while len(live) > 24 or (live and rng.random() < 0.45):
                    retire(int(rng.integers(len(live))))
            while live:
                retire(len(live) - 1)
        except BaseException as exc:  # re-raised in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=300)
    assert not any(th.is_alive() for th in threads), "stress threads did not finish"
    if errors:
        raise errors[0]
    for s in streams:
        s.sync()
    mismatches = counters.to_numpy(streams[0])
    assert list(mismatches) == [0, 0], f"corrupted words per thread: {list(mismatches)}"
    end = pool.stats()
    assert end.used_bytes == start.used_bytes
    assert end.allocations == start.allocations == 0
    assert end.allocations_total == 2 * per_thread
    assert end.allocations_high >= 2
    aux.free_array(counters, streams[0])
    pool.trim(0)


def test_free_on_one_stream_reuse_on_another_is_ordered_without_blocking_the_host(device, aux):
    a, b = create_stream(device), create_stream(device)
    pool = DevicePool(device, release_threshold="max")
    spin = common.probes(device).kernel("spin_stamp")
    stamps = aux.empty(2, np.uint64, a)
    counter = _counter(aux, a)
    n = 16 * MiB
    warm = pool.allocate(n, a)  # reserve the memory first: reuse, not growth, is under test
    pool.free(warm, a)
    a.sync()

    buf = pool.allocate(n, a)
    common.fill_pattern(device, a, int(buf.handle), n, 1)
    launch(a, spin, 1, 32, np.uint64(30_000_000), np.uint64(stamps.ptr))  # A is busy 30 ms
    common.check_pattern(device, a, int(buf.handle), n, 1, counter.ptr)  # A's last use
    pool.free(buf, a)
    t0 = time.perf_counter()
    other = pool.allocate(n, b)  # may be the same memory: the driver orders it by an event
    host_ms = (time.perf_counter() - t0) * 1e3
    common.fill_pattern(device, b, int(other.handle), n, 2)
    b.sync()
    a.sync()
    assert host_ms < 5.0, f"allocate on B blocked the host {host_ms:.1f} ms while A was busy"
    assert int(counter.to_numpy(a)[0]) == 0, "B overwrote memory that A was still reading"
    pool.free(other, b)
    b.sync()
    aux.free_array(stamps, a)
    aux.free_array(counter, a)


def test_hand_off_orders_a_buffer_written_on_one_stream_and_freed_on_another(device, aux):
    a, b = create_stream(device), create_stream(device)
    pool = DevicePool(device)
    counter = _counter(aux, a)
    spin = common.probes(device).kernel("spin_stamp")
    stamps = aux.empty(2, np.uint64, a)
    for i in range(20):
        buf = pool.allocate(MiB, a)
        launch(a, spin, 1, 32, np.uint64(200_000), np.uint64(stamps.ptr))  # the write comes late
        common.fill_pattern(device, a, int(buf.handle), MiB, 10 + i)
        pool.hand_off(buf, a, b)
        common.check_pattern(device, b, int(buf.handle), MiB, 10 + i, counter.ptr)
        pool.free(buf, b)
    b.sync()
    a.sync()
    assert int(counter.to_numpy(a)[0]) == 0
    assert pool.stats().allocations == 0


def test_statistics_high_water_marks_and_reset(device, stream):
    pool = DevicePool(device, release_threshold="max")
    bufs = [pool.allocate(4 * MiB, stream) for _ in range(5)]
    s = pool.stats()
    assert s.allocations == 5 and s.allocations_high == 5 and s.allocations_total == 5
    assert s.used_bytes >= 20 * MiB and s.used_high_bytes >= s.used_bytes
    assert s.reserved_bytes >= s.used_bytes
    for b in bufs[1:]:
        pool.free(b, stream)
    stream.sync()
    pool.reset_high_water_marks()
    s = pool.stats()
    assert s.allocations == 1 and s.allocations_high == 1 and s.allocations_total == 5
    assert s.used_high_bytes == s.used_bytes  # reset to the current value
    pool.free(bufs[0], stream)
    stream.sync()
    assert pool.stats().used_bytes == 0
    with pytest.raises(ValueError, match="already freed"):
        pool.free(bufs[0], stream)


def test_release_threshold_max_keeps_and_zero_returns_at_sync(device, stream):
    keep = DevicePool(device, release_threshold="max")
    give = DevicePool(device, release_threshold=0)
    for p in (keep, give):
        bufs = [p.allocate(32 * MiB, stream) for _ in range(4)]
        for b in bufs:
            p.free(b, stream)
        stream.sync()  # the pool releases memory above its threshold here
    assert keep.stats().reserved_bytes >= 128 * MiB
    assert give.stats().reserved_bytes == 0
    assert keep.release_threshold == 2**64 - 1 and give.release_threshold == 0
    keep.trim(0)
    assert keep.stats().reserved_bytes == 0


def test_reuse_policies_default_on_and_switchable(device):
    pool = DevicePool(device)
    assert pool.reuse_policies() == {"follow_event_dependencies": True, "opportunistic": True,
                                     "internal_dependencies": True}
    pool.set_reuse_policies(internal_dependencies=False)
    assert pool.reuse_policies()["internal_dependencies"] is False
    with pytest.raises(ValueError, match="unknown reuse policy"):
        pool.set_reuse_policies(sometimes=True)


def test_out_of_memory_trims_retries_then_raises_a_clear_memory_error(device, stream):
    pool = DevicePool(device, release_threshold="max", max_size=256 * MiB)
    a = pool.allocate(160 * MiB, stream)
    with pytest.raises(MemoryError) as info:
        pool.allocate(128 * MiB, stream)
    text = str(info.value)
    for word in ("cannot allocate", str(128 * MiB), "in use", "reserved", "free", "max_size"):
        assert word in text, text
    assert pool.stats().allocations == 1  # nothing was freed behind our back
    pool.free(a, stream)
    # 160 MiB stay reserved (threshold "max"); 200 MiB more would pass max_size unless
    # the pool trims: the trim-and-retry makes it succeed.
    b = pool.allocate(200 * MiB, stream)
    pool.free(b, stream)
    stream.sync()
    assert pool.stats().used_bytes == 0


def test_pool_arrays_are_seen_by_torch_without_copy(device, stream):
    torch = pytest.importorskip("torch")
    pool = DevicePool(device)
    arr = pool.empty((64, 32), np.float32, stream)
    t = torch.as_tensor(arr, device="cuda")
    assert t.data_ptr() == arr.ptr and tuple(t.shape) == (64, 32)
    del t
    stream.sync()
    pool.free_array(arr, stream)


def test_cupy_allocates_from_the_fullpipe_pool(device, stream):
    cupy = pytest.importorskip("cupy")
    pool = DevicePool(device, release_threshold="max")
    before = pool.stats().used_bytes
    cupy_pool = pool.cupy_allocator()  # cupy.cuda.MemoryAsyncPool(pool_handles=int(pool.handle))
    cs = cupy.cuda.Stream(non_blocking=True)
    with cupy.cuda.using_allocator(cupy_pool.malloc), cs:
        x = cupy.arange(1 << 20, dtype=cupy.float32)
        assert pool.stats().used_bytes >= before + 4 * MiB  # CuPy's memory came from our pool
        assert float(x[-1]) == float((1 << 20) - 1)
        del x
        cs.synchronize()
    assert pool.stats().used_bytes == before
    # And the other way: a pool array is a CuPy array without a copy.
    arr = pool.empty(1000, np.float32, stream)
    assert cupy.asarray(arr).data.ptr == arr.ptr
    pool.free_array(arr, stream)
    stream.sync()
