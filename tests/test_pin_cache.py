"""CPU tests of the pin-down cache (cuda/pin_cache.py) and StreamPipeline(pin_in_place)
on the fake driver of test_pipeline_fakecuda.py, which here also registers host
ranges: when an array is pinned in place, what the cache keeps alive and when it lets
go, the cap, refusals, and the same bytes as through the ring."""

from __future__ import annotations

import dataclasses
import gc
import time
import weakref

import numpy as np
import pytest

import fullpipe.cuda.pin_cache as fpc
import fullpipe.pipeline.executor as fexec
from fullpipe.cuda.pin_cache import PinCache
from fullpipe.pipeline import StreamPipeline
from fullpipe.pipeline.workload import reference
from tests import test_pipeline_fakecuda as base
from tests.test_pipeline_fakecuda import SUCCESS, FakeMix

fake = base.fake
MiB = 1 << 20
ERR_ALREADY_REGISTERED = 712


@pytest.fixture
def pins(fake, monkeypatch):
    """The fake driver registers ranges (``registered``: address -> bytes; addresses in
    ``refuse`` fail as CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED); a fresh process-wide
    cache that registers arrays of 1 MiB and more."""
    registered: dict[int, int] = {}
    refuse: set[int] = set()
    calls = {"register": 0}

    def register(ptr, nbytes, flags):
        calls["register"] += 1
        if ptr in refuse or any(p < ptr + nbytes and ptr < p + n for p, n in registered.items()):
            return (ERR_ALREADY_REGISTERED,)  # (the driver refuses any overlap)
        registered[ptr] = nbytes
        return (SUCCESS,)

    def unregister(ptr):
        registered.pop(ptr)
        return (SUCCESS,)

    fake.driver.cuMemHostRegister = register
    fake.driver.cuMemHostUnregister = unregister

    def is_pinned(a):  # as memory.is_pinned answers: the first and the last byte each in memory the driver
        addr = a.__array_interface__["data"][0]  # allocated pinned or inside a registered range
        return all(addr in fake.pinned or any(p <= at < p + n for p, n in registered.items())
                   for at in (addr, addr + max(a.nbytes, 1) - 1)) or addr in fake.pinned

    monkeypatch.setattr(fexec, "is_pinned", is_pinned)
    cache = PinCache(cap_bytes=64 * MiB, min_bytes=1 * MiB, reap_interval_s=None)  # (the reaper: its own test)
    monkeypatch.setattr(fpc, "_default", cache)
    return type("Pins", (), dict(cache=cache, registered=registered, refuse=refuse, calls=calls, fake=fake))


def _arrays(n_words, seed=0):
    x = np.random.default_rng(seed).integers(0, 2**32, n_words, dtype=np.uint32)
    return x, np.full_like(x, 0xDEADBEEF)


def test_an_array_seen_twice_is_pinned_in_place_and_copied_directly(pins):
    x, out = _arrays(1 << 20)  # 4 MiB each way, 2 MiB chunks: through the ring, not in bulk
    with StreamPipeline(FakeMix(), streams=2, chunk="2MiB") as pipe:
        pipe.run(x, out=out)
        assert pipe.stats.staging == {"input": "ring", "output": "ring"} and not pins.registered
        assert "in_place" not in pipe.stats.pinned
        out.fill(0)
        pipe.run(x, out=out)
        np.testing.assert_array_equal(out, reference(x, 2))
        st = pipe.stats
        assert st.staging == {"input": "pinned in place", "output": "pinned in place"}
        assert st.pinned["in_place"]["input"] == st.pinned["in_place"]["output"] == "registered now"
        assert pins.registered == {x.ctypes.data: x.nbytes, out.ctypes.data: out.nbytes}
        assert st.pinned["in_place"]["cache_bytes"] == 2 * x.nbytes
        x[:] = np.random.default_rng(1).integers(0, 2**32, x.size, dtype=np.uint32)
        pipe.run(x, out=out)
        np.testing.assert_array_equal(out, reference(x, 2))
        assert pipe.stats.pinned["in_place"]["input"] == "registered before"
        assert pins.calls["register"] == 2
        base._assert_clean(pipe)


def test_an_array_pinned_in_place_gets_pinned_outputs_only_once_it_has_served_many_runs(pins, monkeypatch):
    """Without out=, an input the cache pinned in place (pageable to the user) gets pageable
    outputs, staged, until it has served PINNED_OUTPUTS_AFTER_RUNS runs, then pinned ones
    from the pinned pool (the D2H straight in): the ski-rental rule of _Pins.pinned_outputs.
    Pinned at once, its first two outputs cost 6.9 s more for 4.3 GB on an H100 host
    (session 21); a pinned input's outputs are pinned from its first run."""
    monkeypatch.setattr(fexec, "PINNED_OUTPUTS_AFTER_RUNS", 3)
    x, _ = _arrays(1 << 20)
    xs = _batches(4, 300 * 1024, 1024)
    with StreamPipeline(FakeMix(), streams=2, chunk="2MiB") as pipe:
        for k in range(5):  # seen, registered (its run 1), runs 2, 3, 4
            y = pipe.run(x)
            np.testing.assert_array_equal(y, reference(x, 2))
            st = pipe.stats
            pinned_out = k >= 3
            assert st.staging == {"input": "pinned in place" if k else "ring",
                                  "output": "direct" if pinned_out else "ring"}, (k, st.staging)
            assert (st.pinned["pool_held_bytes"] > st.pinned["ring_bytes"]) == pinned_out  # (an output block)
            if k:
                assert st.pinned["in_place"]["input_runs"] == k
            del y
        for k in range(5):
            ys = pipe.run_batches(xs)
            for a, b in zip(xs, ys):
                np.testing.assert_array_equal(b, reference(a, 2))
            assert pipe.stats.staging["input"] == ("pinned in place" if k else "ring")
            assert (pipe.stats.staging["output"] == "ring") == (k < 3), (k, pipe.stats.staging)
            del ys
        p = x.copy()
        pins.fake.pinned.add(p.ctypes.data)  # pinned by its owner: a pinned output, from the pinned pool
        y = pipe.run(p)
        assert pipe.stats.staging == {"input": "direct", "output": "direct"}
        assert pipe.stats.pinned["allocations"] + pipe.stats.pinned["reuses"] == 1  # (its output, from the pool)
        np.testing.assert_array_equal(y, reference(x, 2))
        base._assert_clean(pipe)


@pytest.mark.filterwarnings("ignore:.*nothing to overlap")  # the view is one chunk
def test_a_small_view_of_an_array_pinned_in_place_is_held_and_gets_a_staged_output(pins):
    """A view too small to be registered by itself, inside an array the cache registered:
    the driver calls it pinned, but the cache pinned it, not its owner. Its run holds the
    entry (so that nothing lets it go mid-copy) and counts it, and its output is staged as
    any output of an input pinned in place is (before session 21's review: taken for an
    owner's pinned memory, the entry not held, a pinned output)."""
    x, _ = _arrays(1 << 20)
    with StreamPipeline(FakeMix(), streams=2, chunk="2MiB") as pipe:
        for _ in range(2):
            pipe.run(x)
        assert pins.registered == {x.ctypes.data: x.nbytes}
        entry = next(iter(pins.cache._entries.values()))
        users = []
        real_release = pins.cache.release
        pins.cache.release = lambda e: users.append(e.users) or real_release(e)
        y = pipe.run(x[:1000])
        np.testing.assert_array_equal(y, reference(x[:1000], 2))
        assert pipe.stats.staging == {"input": "direct", "output": "ring"}, pipe.stats.staging
        assert users == [1] and entry.users == 0 and entry.runs == 2  # (held by that run, counted once)


def test_the_cache_keeps_a_registered_array_alive_until_the_next_run_after_the_user_let_go(pins):
    x, out = _arrays(1 << 20)
    with StreamPipeline(FakeMix(), streams=2, chunk="2MiB") as pipe:
        pipe.run(x, out=out)
        pipe.run(x, out=out)
        gone = weakref.ref(x)
        addr = x.ctypes.data
        del x
        gc.collect()
        assert gone() is not None and addr in pins.registered  # registered memory is never freed
        y, out2 = _arrays(600_000, seed=3)  # any run is a safe point to let go
        pipe.run(y, out=out2)
        assert gone() is None and addr not in pins.registered
        assert out.ctypes.data in pins.registered  # still held by the caller
        assert pins.cache.stats.unregistrations == 1


def test_the_reaper_lets_go_of_a_dropped_array_without_another_run(pins):
    cache = PinCache(cap_bytes=64 * MiB, min_bytes=1 * MiB, reap_interval_s=0.02)
    x = np.zeros(1 << 20, np.uint32)
    kept = np.zeros(1 << 20, np.uint32)
    for arr in (x, kept):
        cache.acquire(arr, arr)  # seen
        e, _ = cache.acquire(arr, arr)  # registered
        cache.release(e)
    del arr
    view = x[10:]  # a view holds the array: still used
    gone = weakref.ref(x)
    addr = x.ctypes.data
    del x
    time.sleep(0.2)
    assert addr in pins.registered and gone() is not None
    del view
    deadline = time.monotonic() + 5
    while gone() is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert gone() is None and addr not in pins.registered  # unregistered, then freed
    assert kept.ctypes.data in pins.registered and cache.stats.unregistrations == 1
    del kept
    deadline = time.monotonic() + 5
    while cache._reaper is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cache._reaper is None and not pins.registered  # nothing left: the reaper stopped
    cache.close()


def test_a_view_registers_its_whole_array_once(pins):
    x, out = _arrays(2 << 20)
    half = x.size // 2
    with StreamPipeline(FakeMix(), streams=2, chunk="2MiB") as pipe:
        pipe.run(x[:half], out=out[:half])
        pipe.run(x[:half], out=out[:half])  # the second sighting of the owning arrays
        assert pins.registered == {x.ctypes.data: x.nbytes, out.ctypes.data: out.nbytes}
        out.fill(0)
        pipe.run(x[half:], out=out[half:])  # inside a registered array: direct at once
        assert pipe.stats.pinned["in_place"]["input"] == "registered before"
        np.testing.assert_array_equal(out[half:], reference(x[half:], 2))
        assert pins.calls["register"] == 2


def test_a_slice_of_a_much_larger_array_registers_only_itself(pins):
    x, out = _arrays(4 << 20)  # 16 MiB each
    part = slice(1 << 19, (1 << 19) + (1 << 20))  # 4 MiB of them, not at the start
    with StreamPipeline(FakeMix(), streams=2, chunk="2MiB") as pipe:
        for _ in range(2):
            pipe.run(x[part], out=out[part])
        assert pins.registered == {x[part].ctypes.data: x[part].nbytes, out[part].ctypes.data: out[part].nbytes}
        out.fill(0)
        inner = slice(part.start + 1024, part.stop - 1024)
        pipe.run(x[inner], out=out[inner])  # inside a registered range: held, nothing new
        assert pipe.stats.pinned["in_place"]["input"] == "registered before"
        np.testing.assert_array_equal(out[inner], reference(x[inner], 2))
        assert pins.calls["register"] == 2


@pytest.mark.parametrize("parts", ["first half", "both ends"])
def test_an_array_the_cache_pinned_only_in_parts_is_not_copied_directly(pins, parts):
    """Views of one array pinned in place (a list of them seen twice), then the whole array
    seen twice: its first byte, or both of its ends, are pinned, the rest is not. Copied
    directly, the copies past the views fail (CUDA_ERROR_INVALID_VALUE on an H100, session
    20) or read memory the cache may unregister meanwhile; it goes through the ring."""
    x, _ = _arrays(4 << 20)  # 16 MiB
    q = 1 << 18  # 1 MiB of words
    views = ([x[i:i + q] for i in range(0, 8 * q, q)] if parts == "first half"
             else [x[:q], x[-q:]])
    with StreamPipeline(FakeMix(), streams=2, chunk="2MiB") as pipe:
        for _ in range(2):
            pipe.run_batches(views)
        assert pipe.stats.staging["input"] == "pinned in place"
        assert fexec.is_pinned(x[:1]) and fexec.is_pinned(x) == (parts == "both ends")  # the driver, at the ends
        assert pins.cache.overlap(x.ctypes.data, x.nbytes) == "partial"
        assert pins.cache.overlap(x[1:q - 1].ctypes.data, x[1:q - 1].nbytes) == "inside"
        assert pins.cache.overlap(x[q + 1:2 * q].ctypes.data, 4) == ("inside" if parts == "first half" else "none")
        for _ in range(2):
            y = pipe.run(x)
            np.testing.assert_array_equal(y, reference(x, 2))
            assert pipe.stats.staging["input"] == "ring", pipe.stats.staging


@pytest.mark.filterwarnings("ignore:.*nothing to overlap")  # the small array is one chunk
def test_small_pinned_foreign_and_opted_out_arrays_are_never_registered(pins):
    small, small_out = _arrays(100_000)  # 400 KB < 1 MiB
    pinned, pinned_out = _arrays(1 << 20)
    pins.fake.pinned.update({pinned.ctypes.data, pinned_out.ctypes.data})
    big, big_out = _arrays(1 << 20, seed=2)
    foreign = np.frombuffer(bytearray(big.tobytes()), dtype=np.uint32)  # memory NumPy does not own
    with StreamPipeline(FakeMix(), streams=2, chunk="2MiB") as pipe:
        for _ in range(3):
            pipe.run(small, out=small_out)
            pipe.run(pinned, out=pinned_out)
            pipe.run(foreign, out=big_out[: foreign.size])
        assert pipe.stats.staging["input"] == "ring"
    held = []
    real_hold = pins.cache.hold
    pins.cache.hold = lambda arr: held.append(real_hold(arr)) or held[-1]
    for opts, out_staging in (({"pin_in_place": False}, "direct"), ({"staging": "ring"}, "ring")):
        held.clear()
        with StreamPipeline(FakeMix(), streams=2, chunk="2MiB", **opts) as pipe:
            for _ in range(3):
                pipe.run(big, out=big_out)
            # big_out was registered by the run of ``foreign`` above: the driver says it is pinned.
            # Without pin_in_place it is copied directly, its entry held by each run (another
            # thread may not let it go meanwhile); staging="ring" copies it by memmove, holds nothing
            assert pipe.stats.staging == {"input": "ring", "output": out_staging}
            assert [e is not None for e in held] == [out_staging == "direct"] * len(held)
            assert len(held) == (3 if out_staging == "direct" else 0)
    assert pins.registered == {big_out.ctypes.data: big_out.nbytes}  # (the foreign run's output)
    with pytest.raises(TypeError, match="pin_in_place must be True or False"):
        StreamPipeline(FakeMix(), pin_in_place="yes")


def test_a_refused_registration_is_not_tried_again(pins):
    x, out = _arrays(1 << 20)
    pins.refuse.add(x.ctypes.data)
    with StreamPipeline(FakeMix(), streams=2, chunk="2MiB") as pipe:
        for _ in range(4):
            out.fill(0)
            pipe.run(x, out=out)
            np.testing.assert_array_equal(out, reference(x, 2))
        assert pipe.stats.staging == {"input": "ring", "output": "pinned in place"}
    assert pins.calls["register"] == 2 and pins.cache.stats.refused == 1


def test_the_cap_lets_the_least_recently_used_idle_array_go(pins):
    pins.cache.cap_bytes = 10 * MiB
    a, b, c = (np.zeros(1 << 20, np.uint32) for _ in range(3))  # 4 MiB each
    cache = pins.cache
    for arr in (a, b):
        cache.acquire(arr, arr)  # seen
        e, _ = cache.acquire(arr, arr)  # registered
        cache.release(e)
    cache.acquire(c, c)
    held, _ = cache.acquire(a, a)  # a is in use now: b is the one to go
    e, _ = cache.acquire(c, c)
    assert e is not None and set(pins.registered) == {a.ctypes.data, c.ctypes.data}
    cache.release(e)
    # nothing idle can make room for 12 MiB: not registered, nothing let go
    d = np.zeros(3 << 20, np.uint32)
    cache.acquire(d, d)
    assert cache.acquire(d, d)[0] is None and a.ctypes.data in pins.registered
    cache.release(held)
    assert cache.clear() == 2 and not pins.registered


def test_making_room_lets_go_of_dropped_arrays_before_used_ones(pins):
    pins.cache.cap_bytes = 10 * MiB
    cache = pins.cache
    a, b = (np.zeros(1 << 20, np.uint32) for _ in range(2))  # 4 MiB each
    for arr in (a, b):  # a is the least recently used
        cache.acquire(arr, arr)
        cache.release(cache.acquire(arr, arr)[0])
    b_addr = b.ctypes.data
    del b, arr  # dropped, but more recently used than a: it goes first
    c = np.zeros(1 << 20, np.uint32)
    cache.acquire(c, c)
    e, _ = cache.acquire(c, c)
    assert e is not None and set(pins.registered) == {a.ctypes.data, c.ctypes.data} and b_addr not in pins.registered
    cache.release(e)


def test_the_cache_and_the_pinned_pool_share_one_cap(pins, monkeypatch):
    import fullpipe.cuda.pinned_pool as fpp

    pinned = {"next": 1 << 40}

    def alloc(n):
        pinned["next"] += n
        return pinned["next"]

    pool = fpp.PinnedPool(16 * MiB, alloc=alloc, free=lambda p: None, on_growth=fpp._default_pool_grows)
    monkeypatch.setattr(fpp, "_default_pool", pool)
    monkeypatch.setattr(fpp, "_growth_hooks", [])
    cache = PinCache(cap_bytes=10 * MiB, min_bytes=1 * MiB, others=fpp.default_pool_held_bytes,
                     reap_interval_s=None)
    fpp.on_default_pool_growth(cache.yield_to_others)
    a, b = (np.zeros(1 << 20, np.uint32) for _ in range(2))  # 4 MiB each
    block = pool.take(4 * MiB)  # the pool holds 4 MiB: room for one array beside it under 10, not two
    for arr in (a, b):
        cache.acquire(arr, arr)
        cache.release(cache.acquire(arr, arr)[0])
    assert set(pins.registered) == {b.ctypes.data} and cache.stats.unregistrations == 1  # a made room
    held, _ = cache.acquire(b, b)  # in use: the pool's growth cannot take it
    block2 = pool.take(4 * MiB)
    assert set(pins.registered) == {b.ctypes.data}
    cache.release(held)
    block3 = pool.take(4 * MiB)  # now idle: the cache lets go, the pool has the first claim
    assert not pins.registered and cache.stats.unregistrations == 2
    for blk in (block, block2, block3):
        pool.give(blk)


def _batches(n, words, gap_words, seed=0):
    """``n`` batches of ``words`` uint32 each, views of one buffer (much larger than any of
    them: each is registered as its own range), the first on a page boundary, each
    ``gap_words`` after the one before."""
    buf = np.zeros(n * (words + gap_words) + 1024, np.uint32)
    first = (-buf.ctypes.data % 4096) // 4
    rng = np.random.default_rng(seed)
    views = [buf[first + i * (words + gap_words):][:words] for i in range(n)]
    for v in views:
        v[:] = rng.integers(0, 2**32, words, dtype=np.uint32)
    return views


def test_a_list_of_batches_seen_again_is_pinned_in_place_as_a_whole(pins):
    xs = _batches(4, 300 * 1024, 1024)  # 1.2 MiB each (over the bulk size: the ring), a page apart
    outs = _batches(4, 300 * 1024, 1024, seed=1)
    with StreamPipeline(FakeMix(), streams=2) as pipe:
        pipe.run_batches(xs, outs=outs)
        assert pipe.stats.staging == {"input": "ring", "output": "ring"} and not pins.registered
        for o in outs:
            o.fill(0)
        pipe.run_batches(xs, outs=outs)  # the same batches again: every one of them registered now
        for x, o in zip(xs, outs):
            np.testing.assert_array_equal(o, reference(x, 2))
        st = pipe.stats
        assert st.staging == {"input": "pinned in place", "output": "pinned in place"}
        assert st.pinned["in_place"]["input"] == "registered now"
        assert pins.registered == {a.ctypes.data: a.nbytes for a in xs + outs}  # (no page shared: one each)
        pipe.run_batches(xs, outs=outs)
        assert pipe.stats.pinned["in_place"]["input"] == "registered before" and pins.calls["register"] == 8
        assert all(e.users == 0 for e in pins.cache._entries.values())  # every run gave its entries back
        base._assert_clean(pipe)


def test_batches_that_share_pages_are_registered_as_one_range_and_let_go_together(pins):
    x, out = _arrays(4 * 300_001 + 7)
    cut = [0, 300_001, 600_002, 900_003, x.size]  # not page multiples: neighbours share a page
    xs = [x[a:b] for a, b in zip(cut, cut[1:])]
    outs = [out[a:b] for a, b in zip(cut, cut[1:])]
    del x
    with StreamPipeline(FakeMix(), streams=2) as pipe:
        for _ in range(2):
            pipe.run_batches(xs, outs=outs)
        assert pipe.stats.staging == {"input": "pinned in place", "output": "pinned in place"}
        assert pins.registered == {xs[0].ctypes.data: sum(v.nbytes for v in xs),
                                   outs[0].ctypes.data: sum(v.nbytes for v in outs)}
        np.testing.assert_array_equal(np.concatenate(outs), reference(np.concatenate(xs), 2))
        addr, last = xs[0].ctypes.data, xs[-1]
        del xs
        gc.collect()
        other, other_out = _arrays(1 << 18, seed=5)
        pipe.run(other, out=other_out)  # a safe point: one batch is still held by the caller
        assert addr in pins.registered
        del last
        gc.collect()
        pipe.run(other, out=other_out)
        assert addr not in pins.registered and outs[0].ctypes.data in pins.registered
        base._assert_clean(pipe)


def test_a_list_with_a_batch_that_cannot_be_registered_is_pinned_not_at_all(pins):
    xs = _batches(4, 300 * 1024, 1024)
    outs = _batches(4, 300 * 1024, 1024, seed=1)
    pins.refuse.add(xs[2].ctypes.data)
    with StreamPipeline(FakeMix(), streams=2) as pipe:
        for _ in range(3):
            for o in outs:
                o.fill(0)
            pipe.run_batches(xs, outs=outs)
            for x, o in zip(xs, outs):
                np.testing.assert_array_equal(o, reference(x, 2))
        assert pipe.stats.staging == {"input": "ring", "output": "pinned in place"}
    assert pins.registered == {o.ctypes.data: o.nbytes for o in outs}  # the inputs registered first went back
    assert pins.calls["register"] == 3 + 4  # tried once: two registered and undone, the third refused


def test_run_batches_holds_arrays_registered_by_a_run_of_the_whole(pins):
    x, out = _arrays(2 << 20)
    views = [x[i:i + (1 << 18)] for i in range(0, x.size, 1 << 18)]
    outs = [out[i:i + (1 << 18)] for i in range(0, out.size, 1 << 18)]
    with StreamPipeline(FakeMix(), streams=2) as pipe:
        pipe.run(x, out=out)
        pipe.run(x, out=out)
        assert set(pins.registered) == {x.ctypes.data, out.ctypes.data}
        for o in outs:
            o.fill(0)
        pipe.run_batches(views, outs=outs)  # inside registered arrays: held, nothing new registered
        assert pipe.stats.pinned["in_place"] == {"input": "registered before", "output": "registered before",
                                                 "register_ms": 0.0, "cache_bytes": 2 * x.nbytes,
                                                 "input_runs": 2}  # (x's entry: run 2, then this one, once)
        np.testing.assert_array_equal(out, reference(x, 2))
        assert pins.calls["register"] == 2
        assert all(e.users == 0 for e in pins.cache._entries.values())  # and gave them back


def test_chunk_auto_tuned_through_the_ring_is_reused_once_pinned_in_place(pins):
    """The second run of a pageable array pins it in place: the staging changes from the
    ring to direct copies, and chunk='auto' reuses the first run's models (GPU copies and
    compute as measured, the ring's host copies dropped) instead of probing again."""
    pins.fake.jitter["value"] = 0.0
    pins.cache.cap_bytes = 256 * MiB
    x, out = _arrays(48 * MiB // 4)
    with StreamPipeline(FakeMix(), streams=2) as pipe:
        pipe.run(x, out=out)
        assert pipe.stats.chunk["source"] == "tuned" and pipe.stats.staging["input"] in ("ring", "bulk")
        ((ring_key, ring),) = pipe._tuned.items()
        assert {"stage_in", "drain_out"} <= set(ring.models)
        out.fill(0)
        pipe.run(x, out=out)
        np.testing.assert_array_equal(out, reference(x, 2))
        st = pipe.stats
        assert st.staging == {"input": "pinned in place", "output": "pinned in place"}
        assert st.chunk["source"] == "reused from the ring" and st.chunk["probe_batches"] == 0
        assert pipe._tuned[ring_key] is ring  # (the ring's own models stay as they were)
        direct = [t for k, t in pipe._tuned.items() if k != ring_key]
        assert len(direct) == 1 and set(direct[0].models) == {"h2d", "compute", "d2h"}
        # the chunk the ring's runs kept is not carried over: it was chosen for the ring's host costs
        assert "the chunk of the runs before" not in st.chunk["reason"]
        # nor are the ring's runs' corrections: the direct runs make their own
        ring_kept = dataclasses.replace(ring, kept_bytes=st.chunk["bytes"] * 2, refined=2,
                                        seen={"compute": {st.chunk["bytes"]: 1e-3}})
        pipe._tuned[ring_key] = ring_kept
        carried = pipe._tuned_through_ring(x, "direct", "direct")
        assert carried.kept_bytes == 0 and carried.refined == 0 and carried.seen == {}
        pipe._tuned[ring_key] = ring
        # the ring's GPU models, as taken; lowered only where this run refined them
        c = st.chunk["bytes"]
        for k in ("h2d", "compute", "d2h"):
            assert (direct[0].models[k] == ring.models[k] if direct[0].refined == 0
                    else direct[0].models[k].time(c) <= ring.models[k].time(c))
        pipe.run(x, out=out)
        assert pipe.stats.chunk["source"] == "reused"
        base._assert_clean(pipe)


def test_a_new_array_where_a_dropped_one_was_is_seen_for_the_first_time(pins, monkeypatch):
    """The allocator puts a new array where a dropped one was (a loop that loads each file
    into a new array): the range is the same, the array is not, and registering it would
    not pay back. Only the same NumPy array seen again is registered."""
    x, _ = _arrays(1 << 20)
    y = x.copy()
    real = fpc._owning_memory

    def at_x(obj, arr):  # y as if the allocator had put it at x's address
        ptr, nbytes, keep, user, _ = real(obj, arr)
        return x.ctypes.data, nbytes, keep, user, x.ctypes.data

    monkeypatch.setattr(fpc, "_owning_memory", at_x)
    assert pins.cache.acquire(x, x) == (None, 0.0)  # first sighting of x
    assert pins.cache.acquire(y, y) == (None, 0.0)  # the same range, another array: first sighting of y
    assert pins.calls["register"] == 0
    entry, _ = pins.cache.acquire(y, y)  # y again: registered
    assert entry is not None and pins.calls["register"] == 1
    pins.cache.release(entry)


def test_imap_pins_no_window_in_place_but_copies_what_runs_pinned_directly(pins):
    xs = _batches(4, 300 * 1024, 1024)  # 1.2 MiB each: the ring, and a list over the cache's 1 MiB
    with StreamPipeline(FakeMix(), streams=2) as pipe:
        for _ in range(3):  # the same batches again and again: still each window's once
            got = list(pipe.imap(xs, window=4, read_ahead=False))
            assert pipe.stats.staging["input"] == "ring"
        assert not pins.registered
        for _ in range(2):
            pipe.run_batches(xs)  # run_batches pins the list at its second sighting
        assert len(pins.registered) == 4
        got = list(pipe.imap(xs, window=4, read_ahead=False))  # copied directly, nothing registered
        assert pipe.stats.staging["input"] == "direct" and pins.calls["register"] == 4
        for x, y in zip(xs, got):
            np.testing.assert_array_equal(y, reference(x, 2))
        base._assert_clean(pipe)


@pytest.mark.parametrize("ptr, nbytes, want", [
    (1000, 100, "inside"), (1100, 50, "inside"),            # an entry, or inside one
    (1050, 100, "partial"), (1000, 350, "partial"),         # across two adjacent entries; all three and a gap
    (1200, 101, "partial"), (1290, 20, "partial"),          # from a gap into an entry
    (900, 101, "partial"),                                   # its last byte in the first entry
    (900, 100, "none"), (1200, 100, "none"), (1200, 10, "none"), (1350, 5, "none"),  # touching ends only
])
def test_overlap_of_a_range_with_the_registrations(ptr, nbytes, want):
    cache = PinCache(cap_bytes=1 << 40, reap_interval_s=None)
    for p, n in [(1000, 100), (1100, 100), (1300, 50)]:  # two adjacent entries, a gap, a third
        cache._add(fpc._Entry(p, n, None, None, p))
    assert cache.overlap(ptr, nbytes) == want


def test_the_entry_holding_a_range_is_found_among_many():
    """``_find`` (a run's arrays held by the entries they lie in) by bisection over the
    entries' starts, against the definition, on 2000 random disjoint registrations and
    ranges in them, across their ends and in the gaps."""
    rng = np.random.default_rng(5)
    cache = PinCache(cap_bytes=1 << 40, reap_interval_s=None)
    spans, at = [], 4096
    for _ in range(2000):
        at += int(rng.integers(0, 3)) * 4096  # adjacent entries and gaps
        n = int(rng.integers(1, 64)) * 4096
        spans.append((at, n))
        at += n
    for p, n in rng.permutation(spans):  # (registered in any order)
        cache._add(fpc._Entry(int(p), int(n), None, None, int(p)))

    def holder(ptr, nbytes):
        return next(((p, n) for p, n in spans if p <= ptr and ptr + nbytes <= p + n), None)

    for _ in range(3000):
        ptr = int(rng.integers(0, at + 8192))
        nbytes = int(rng.integers(1, 3 * 4096))
        e = cache._find(ptr, nbytes)
        assert (None if e is None else (e.ptr, e.nbytes)) == holder(ptr, nbytes)
