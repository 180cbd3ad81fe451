"""CPU tests of the pinned host pool: the real pool logic over a fake allocator that
hands out ordinary host memory (so views, reuse and concurrent use are real)."""

from __future__ import annotations

import ctypes
import gc
import random
import threading

import numpy as np
import pytest

from fullpipe.cuda import memory
from fullpipe.cuda import pinned_pool as pp
from fullpipe.cuda.pinned_pool import MIN_CLASS_BYTES, PinnedPool, PinnedPoolFull, size_class

KiB, MiB = 1024, 1024 * 1024


class FakeHost:
    """alloc/free over ctypes buffers; remembers every call. ``fail`` makes the next
    allocations raise the given exceptions, one each."""

    def __init__(self):
        self.live: dict[int, ctypes.Array] = {}
        self.allocs: list[int] = []
        self.freed: list[int] = []
        self.fail: list[BaseException] = []
        self.lock = threading.Lock()

    def alloc(self, n: int) -> int:
        if self.fail:
            raise self.fail.pop(0)
        buf = ctypes.create_string_buffer(n)
        addr = ctypes.addressof(buf)
        with self.lock:
            self.live[addr] = buf
            self.allocs.append(n)
        return addr

    def free(self, addr: int) -> None:
        with self.lock:
            buf = self.live.pop(addr)  # KeyError on a double or foreign free
            self.freed.append(len(buf))

    @property
    def live_bytes(self) -> int:
        return sum(len(b) for b in self.live.values())


@pytest.fixture
def host():
    return FakeHost()


def make(host, cap=64 * MiB):
    return PinnedPool(cap, alloc=host.alloc, free=host.free)


def test_size_classes_bound_the_waste_and_stay_page_aligned():
    rng = random.Random(1)
    sizes = [1, MIN_CLASS_BYTES - 1, MIN_CLASS_BYTES, MIN_CLASS_BYTES + 1, 3 * MiB, 1 << 30, (1 << 30) + 1]
    sizes += [rng.randrange(1, 1 << 32) for _ in range(2000)]
    for n in sizes:
        c = size_class(n)
        assert c >= n and c >= MIN_CLASS_BYTES and c % 4096 == 0
        if n > MIN_CLASS_BYTES:
            assert c <= 1.25 * n  # at most a quarter over
    ordered = sorted(sizes)
    assert [size_class(n) for n in ordered] == sorted(size_class(n) for n in ordered)  # monotone
    # few distinct classes across a wide range: what makes reuse across sizes possible
    assert len({size_class(n) for n in range(MiB + 1, 2 * MiB + 1, 997)}) == 4  # (1, 2] MiB


def test_steady_state_allocates_once(host):
    pool = make(host)
    for i in range(10):
        with pool.take(3 * MiB - 4096 * i) as block:  # slightly different sizes, one class
            block.array(block.requested, np.uint8)[:] = i
    s = pool.stats
    assert (s.allocations, s.reuses, s.frees) == (1, 9, 0)
    assert s.allocated_bytes == s.held_bytes == size_class(3 * MiB) and s.in_use_bytes == 0
    assert host.allocs == [size_class(3 * MiB)]


def test_reuse_is_best_fit_within_twice_the_request(host):
    pool = make(host)
    small, big = pool.take(128 * KiB), pool.take(1 * MiB)
    pool.give(small)
    pool.give(big)
    assert pool.take(100 * KiB) is small  # the smallest that fits
    assert pool.take(600 * KiB) is big  # 1 MiB <= 2 x 600 KiB
    pool.give(big)
    fresh = pool.take(400 * KiB)  # 1 MiB idle, but more than twice 400 KiB: pin a new one
    assert fresh is not big and fresh.nbytes == size_class(400 * KiB)
    assert pool.stats.allocations == 3 and pool.stats.reuses == 2


def test_usage_records_count_only_their_own_takes(host):
    pool = make(host)
    mine, theirs = pp.PinnedUsage(), pp.PinnedUsage()
    a = pool.take(1 * MiB, usage=mine)
    pool.give(pool.take(2 * MiB, usage=theirs))
    pool.give(a)
    b = pool.empty(1 * MiB, np.uint8, usage=mine)  # reuses a's block
    assert mine == pp.PinnedUsage(allocations=1, allocated_bytes=1 * MiB, reuses=1)
    assert theirs == pp.PinnedUsage(allocations=1, allocated_bytes=2 * MiB, reuses=0)
    del b


def test_views_see_the_memory_and_outlive_nothing_they_should_not(host):
    pool = make(host)
    block = pool.take(4096)
    a = block.array((16, 8), np.float64)
    a[:] = np.arange(128).reshape(16, 8)
    b = block.array(128, np.float64)  # a second view of the same memory
    np.testing.assert_array_equal(b, np.arange(128))
    with pytest.raises(ValueError, match="does not fit"):
        block.array(block.nbytes + 1)
    pool.give(block)
    with pytest.raises(ValueError, match="given back"):
        block.array(8)


def test_cap_frees_idle_buffers_least_recently_given_back_first(host):
    pool = make(host, cap=2 * MiB)
    a, b = pool.take(512 * KiB), pool.take(512 * KiB)
    pool.give(b)  # b is older idle than a
    pool.give(a)
    c = pool.take(1536 * KiB)  # 1 MiB held idle + 1.5 MiB > 2 MiB: free one idle block
    assert host.freed == [512 * KiB] and b.ptr == 0 and a.ptr != 0
    s = pool.stats
    assert s.held_bytes == 2 * MiB and s.in_use_bytes == 1536 * KiB and s.frees == 1
    pool.give(c)


def test_cap_counts_buffers_in_use_and_frees_nothing_when_it_cannot_fit(host):
    pool = make(host, cap=1 * MiB)
    held = pool.take(768 * KiB)
    idle = pool.take(128 * KiB)
    pool.give(idle)
    before = pool.stats
    with pytest.raises(PinnedPoolFull, match="in use and the cap is") as err:
        pool.take(512 * KiB)
    assert isinstance(err.value, MemoryError)
    assert pool.stats == before and host.freed == []  # nothing freed for a take that fails anyway
    with pytest.raises(PinnedPoolFull):
        pool.take(2 * MiB)  # larger than the cap itself
    pool.give(held)


def test_empty_arrays_go_back_when_collected(host):
    pool = make(host)
    out = pool.empty((1000, 3), np.float32)
    out[:] = 7
    view = out[10:20]
    del out
    gc.collect()
    assert pool.stats.in_use_bytes > 0  # a view is still alive
    np.testing.assert_array_equal(view, 7)
    del view
    gc.collect()
    s = pool.stats
    assert s.in_use_bytes == 0 and s.held_bytes == s.allocated_bytes
    again = pool.empty((1000, 3), np.float32)  # second run: reused, nothing pinned
    assert pool.stats.allocations == 1 and pool.stats.reuses == 1
    del again


def test_give_rejects_mistakes(host):
    pool, other = make(host), make(host)
    block = pool.take(10)
    with pytest.raises(ValueError, match="from this pool"):
        other.give(block)
    with pytest.raises(ValueError, match="from this pool"):
        pool.give(object())
    pool.give(block)
    with pytest.raises(ValueError, match="already given back"):
        pool.give(block)
    arr = pool.empty(10, np.uint8)
    with pytest.raises(ValueError, match="goes back by itself"):
        pool.give(_block_of(arr))


def _block_of(arr):
    """The block backing an array from empty() (found through the array's owner chain)."""
    base = arr
    while not hasattr(base, "owner"):
        base = base.base
    return base.owner.block


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "1"])
def test_bad_sizes_are_value_errors(host, value):
    with pytest.raises(ValueError, match="cap_bytes"):
        PinnedPool(value, alloc=host.alloc, free=host.free)
    with pytest.raises(ValueError, match="nbytes"):
        make(host).take(value)


def test_trim_keeps_what_it_is_told_and_not_buffers_in_use(host):
    pool = make(host)
    blocks = [pool.take(1 * MiB) for _ in range(4)]
    busy = blocks.pop()
    for b in blocks:
        pool.give(b)
    assert pool.trim(2 * MiB) == 2 * MiB  # 4 MiB held -> 2 MiB: two idle blocks go
    assert pool.stats.held_bytes == 2 * MiB
    assert pool.trim() == 1 * MiB  # the last idle one; the busy one stays
    assert pool.stats.held_bytes == pool.stats.in_use_bytes == 1 * MiB
    pool.give(busy)
    assert host.live_bytes == pool.stats.held_bytes


def test_lowering_the_cap_trims(host):
    pool = make(host)
    for b in [pool.take(1 * MiB) for _ in range(3)]:
        pool.give(b)
    pool.cap_bytes = 1 * MiB
    assert pool.stats.held_bytes == 1 * MiB and pool.cap_bytes == 1 * MiB


def test_out_of_memory_frees_idle_then_retries_then_says_so(host):
    pool = make(host)
    pool.give(pool.take(1 * MiB))
    host.fail = [MemoryError("cannot lock pages")]
    block = pool.take(4 * MiB)  # first try fails, idle 1 MiB freed, second try works
    assert host.freed == [1 * MiB] and block.nbytes == 4 * MiB
    host.fail = [MemoryError("no"), MemoryError("still no")]
    with pytest.raises(MemoryError, match="would not pin"):
        pool.take(8 * MiB)
    s = pool.stats
    assert s.held_bytes == s.in_use_bytes == 4 * MiB  # the failed take left nothing reserved


def test_other_allocation_errors_propagate_and_release_the_reservation(host):
    pool = make(host, cap=1 * MiB)
    host.fail = [RuntimeError("driver exploded")]
    with pytest.raises(RuntimeError, match="exploded"):
        pool.take(1 * MiB)
    assert pool.stats.held_bytes == 0
    pool.give(pool.take(1 * MiB))  # the cap is whole again


def test_close_frees_idle_now_and_the_rest_when_it_comes_back(host):
    pool = make(host)
    idle, busy = pool.take(1 * MiB), pool.take(2 * MiB)
    arr = pool.empty(3 * MiB, np.uint8)
    pool.give(idle)
    pool.close()
    assert host.freed == [1 * MiB]
    with pytest.raises(RuntimeError, match="closed"):
        pool.take(1)
    pool.give(busy)
    del arr
    gc.collect()
    # the collector only queues the free (it may run inside a stream capture, where
    # cuMemFreeHost would invalidate the capture); the next safe point unpins it
    assert host.live_bytes == 3 * MiB
    assert memory.free_collected() == 1
    assert host.live == {}  # everything unpinned


def test_a_collected_pinned_buffer_is_unpinned_at_the_next_safe_point_not_inside_the_collector(monkeypatch):
    calls: list[tuple[str, int]] = []
    keep: dict[int, ctypes.Array] = {}

    def fake_call(name, *args):
        if name == "cuMemHostAlloc":
            buf = ctypes.create_string_buffer(args[0])
            keep[ctypes.addressof(buf)] = buf
            calls.append((name, ctypes.addressof(buf)))
            return ctypes.addressof(buf)
        assert name == "cuMemFreeHost", name
        calls.append((name, args[0]))
        del keep[args[0]]

    monkeypatch.setattr(memory.drv, "call", fake_call)
    monkeypatch.setattr(memory, "ensure_current", lambda *a: None)
    memory.free_collected()  # nothing queued by earlier tests
    a = memory.pinned_empty(1000, np.float32)
    a[:] = 1.5
    ptr = calls[0][1]
    cycle = [a]
    cycle.append(cycle)  # only the cyclic collector frees it
    del a, cycle
    gc.collect()
    assert calls == [("cuMemHostAlloc", ptr)]  # no CUDA call from inside the collector
    b = memory.PinnedBuffer(64)  # the next allocation is a safe point: the queued free runs first
    assert [c[0] for c in calls] == ["cuMemHostAlloc", "cuMemFreeHost", "cuMemHostAlloc"]
    assert calls[1] == ("cuMemFreeHost", ptr)
    b.free()  # an explicit free unpins at once
    assert calls[-1] == ("cuMemFreeHost", calls[2][1]) and keep == {}
    b.free()  # twice is harmless
    assert len(calls) == 4


def test_threads_never_share_a_block_and_the_books_balance(host):
    pool = make(host, cap=256 * MiB)
    errors = []
    sizes = [64 * KiB, 200 * KiB, 1 * MiB, 1200 * KiB, 3 * MiB]

    def worker(tid):
        rng = random.Random(tid)
        try:
            for i in range(150):
                n = rng.choice(sizes) - rng.randrange(1000)
                if rng.random() < 0.3:
                    a = pool.empty(n, np.uint8)
                    a[:] = tid
                    assert (a == tid).all()
                    del a
                else:
                    with pool.take(n) as block:
                        v = block.array(n, np.uint8)
                        v[:] = tid
                        assert (v == tid).all(), "another thread wrote into this block"
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    gc.collect()
    s = pool.stats
    assert s.in_use_bytes == 0
    assert s.allocations + s.reuses == 8 * 150
    assert s.held_bytes == host.live_bytes == s.allocated_bytes - sum(host.freed)
    assert s.reuses > 10 * s.allocations  # reuse is the rule, pinning the exception


def test_default_pool_is_one_per_process(monkeypatch):
    monkeypatch.setattr(pp, "_default_pool", None)
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(pp.default_pinned_pool())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(p is seen[0] for p in seen)
    assert seen[0].cap_bytes == pp.default_cap_bytes() > 0
