"""GPU tests of pinning in place (cuda/pin_cache.py, StreamPipeline(pin_in_place=True)):
a pageable NumPy array and a torch CPU tensor seen a second time are registered with
the driver and copied directly; bit-exact on fresh data with poisoned outputs; what
the cache holds, and that it lets go after the caller does; two threads sharing the
registered arrays."""

from __future__ import annotations

import gc
import threading
import time

import numpy as np
import pytest

from fullpipe.cuda.memory import is_pinned
from fullpipe.cuda.pin_cache import PinCache
import fullpipe.cuda.pin_cache as fpc
from fullpipe.pipeline import StreamPipeline
from fullpipe.pipeline.workload import reference

pytestmark = pytest.mark.gpu
POISON = 0xDEADBEEF
MiB = 1 << 20


@pytest.fixture
def cache(monkeypatch):
    c = PinCache(reap_interval_s=None)  # lets go at runs only (the reaper: its own test)
    monkeypatch.setattr(fpc, "_default", c)
    yield c
    gc.collect()
    c.flush()
    c.clear()
    assert c.stats.entries == 0


def test_a_numpy_array_seen_twice_is_pinned_in_place(device, mix, own_pool, cache):
    n = 96 * MiB // 4  # 96 MiB each way
    x = np.random.default_rng(1).integers(0, 2**32, n, dtype=np.uint32)
    out = np.empty_like(x)
    times, staged = [], []
    with StreamPipeline(mix, streams=3, chunk="8MiB", pool=own_pool, device=device) as pipe:
        for rep in range(4):
            x[: 1 << 20] = np.random.default_rng(10 + rep).integers(0, 2**32, 1 << 20, dtype=np.uint32)
            out.fill(POISON)
            t0 = time.perf_counter()
            pipe.run(x, out=out)
            times.append((time.perf_counter() - t0) * 1e3)
            staged.append(pipe.stats.staging["input"])
            assert np.array_equal(out, reference(x, mix.rounds))
        print(f"\nrun times {[round(t, 1) for t in times]} ms, staging {staged}, "
              f"in place: {pipe.stats.pinned.get('in_place')}")
        assert staged == ["ring", "pinned in place", "pinned in place", "pinned in place"]
        assert is_pinned(x) and is_pinned(out)  # the driver says so, where they are
        assert cache.stats.entries == 2 and cache.stats.registered_bytes == 2 * x.nbytes
    del x, out
    gc.collect()
    assert cache.stats.entries == 2  # still registered: the cache keeps them alive until a safe point
    y = np.random.default_rng(2).integers(0, 2**32, 1 << 20, dtype=np.uint32)
    with StreamPipeline(mix, streams=3, chunk="1MiB", pool=own_pool, device=device) as pipe:
        np.testing.assert_array_equal(pipe.run(y), reference(y, mix.rounds))  # a run: the safe point
    assert cache.stats.entries == 0 and cache.stats.unregistrations == 2


def test_a_torch_tensor_and_two_threads_sharing_it(device, own_pool, cache):
    torch = pytest.importorskip("torch")
    x = torch.randn(64 * MiB // 4 * 2)  # 128 MiB
    want = x * 2 + 1
    errors = []

    def f(t):
        return t * 2 + 1

    def worker(k):
        try:
            out = torch.empty_like(x)
            with StreamPipeline(f, streams=2, chunk="8MiB", pool=own_pool, device=device) as pipe:
                for _ in range(3):
                    out.fill_(float("nan"))
                    pipe.run(x, out=out)
                    if not torch.equal(out, want):
                        errors.append(f"thread {k}: wrong output")
                errors.extend([] if pipe.stats.staging["input"] == "pinned in place"
                              else [f"thread {k}: input {pipe.stats.staging['input']}"])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(f"thread {k}: {exc!r}")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert cache.stats.entries >= 1  # x's storage (and each thread's out, seen three times)


def test_a_tensor_passed_as_a_new_view_each_call_stays_registered(device, own_pool, cache):
    torch = pytest.importorskip("torch")
    x = torch.randn(32 * MiB, dtype=torch.float32)  # 128 MiB
    out = torch.empty_like(x)
    with StreamPipeline(lambda t: t + 1, streams=2, chunk="16MiB", pool=own_pool, device=device) as pipe:
        for _ in range(5):
            out.fill_(float("nan"))
            pipe.run(x.view(-1, 1024), out=out.view(-1, 1024))  # new tensor objects, same storages
            assert torch.equal(out, x + 1)
        assert pipe.stats.staging == {"input": "pinned in place", "output": "pinned in place"}
    s = cache.stats
    assert s.registrations == 2 and s.unregistrations == 0, s  # registered once, never let go in between


def _wait_for(cond, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.02)
    return cond()


def test_the_reaper_unregisters_arrays_the_caller_dropped_without_another_run(device, own_pool, monkeypatch):
    """A NumPy array and a torch tensor (passed as a new view each call, so only the
    storage's use count can tell that the caller still holds it) stay registered while
    held, and are unregistered within a second or so of being dropped, with no run after."""
    torch = pytest.importorskip("torch")
    cache = PinCache(reap_interval_s=0.1)
    monkeypatch.setattr(fpc, "_default", cache)
    x = np.random.default_rng(3).standard_normal(24 * MiB, dtype=np.float32)  # 96 MiB
    t = torch.randn(24 * MiB, dtype=torch.float32)
    with StreamPipeline(lambda v: v * 2, streams=2, chunk="16MiB", pool=own_pool, device=device) as pipe:
        for _ in range(3):
            y = pipe.run(x)
            u = pipe.run(t.view(-1, 1024))
        np.testing.assert_array_equal(y, x * 2)
        assert torch.equal(u.view(-1), t * 2)
    del y, u
    assert cache.stats.entries == 2 and is_pinned(x)
    time.sleep(0.5)  # several looks of the reaper: both still held by the caller
    assert cache.stats.entries == 2 and cache.stats.unregistrations == 0
    del t
    assert _wait_for(lambda: cache.stats.entries == 1), cache.stats
    del x
    assert _wait_for(lambda: cache.stats.entries == 0), cache.stats
    assert cache.stats.unregistrations == 2
    assert _wait_for(lambda: cache._reaper is None)  # nothing registered: the reaper stopped
    cache.close()


def test_a_list_of_mid_size_torch_batches_seen_again_is_pinned_in_place(device, own_pool, cache):
    """run_batches of 40 pageable torch tensors of 1.5-3 MiB (96 MiB in all: each too
    large for bulk staging, too small to be pinned by itself) through a tensor function:
    the second run registers the list, those sharing heap pages together; from then on
    the inputs' copies are direct, the outputs (pageable, as the inputs were to the user)
    are staged with nothing newly pinned, and the results are right. Dropping the list
    lets every registration go."""
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(4)
    xs = [torch.randn(int(torch.randint(384, 768, (1,), generator=gen)), 1024, generator=gen) for _ in range(40)]
    want = [x.sum(dim=1) * 2 for x in xs]

    def f(t):
        return t.sum(dim=1) * 2

    with StreamPipeline(f, streams=3, pool=own_pool, device=device) as pipe:
        for run in range(3):
            ys = pipe.run_batches(xs)
            for y, w in zip(ys, want):
                torch.testing.assert_close(y, w, rtol=1e-4, atol=1e-4)  # (sums of 1024 in another order)
            st = pipe.stats
            if run == 0:
                assert st.staging["input"] == "ring" and cache.stats.entries == 0
            else:
                assert st.staging == {"input": "pinned in place", "output": "ring"}, st.staging
                assert st.pinned["in_place"]["input"] == ("registered now" if run == 1 else "registered before")
                assert st.pinned["allocated_bytes"] == 0 and not any(y.is_pinned() for y in ys)
            del ys
        s = cache.stats
        assert s.registrations >= 1 and s.registered_bytes >= sum(x.nbytes for x in xs), s
        del xs
        gc.collect()
        pipe.run(np.zeros(1 << 16, np.float32).reshape(-1, 1024))  # a run: the safe point to let go
    assert cache.stats.entries == 0, cache.stats


@pytest.mark.parametrize("parts", ["first quarter", "both ends"])
def test_an_array_pinned_in_place_only_in_parts_runs_through_the_ring(device, mix, own_pool, cache, parts):
    """Views of one array pinned in place (a list of them seen twice), then the whole array,
    twice: only parts of it are page-locked. Before session 20 the pipeline asked the
    driver about its first byte only, copied it directly, and failed part way
    (cuMemcpyHtoDAsync: CUDA_ERROR_INVALID_VALUE)."""
    n = 256 * MiB // 4
    x = np.random.default_rng(3).integers(0, 2**32, n, dtype=np.uint32)
    q = 8 * MiB // 4
    views = [x[i:i + q] for i in range(0, n // 4, q)] if parts == "first quarter" else [x[:8 * q], x[-8 * q:]]
    with StreamPipeline(mix, streams=3, chunk="16MiB", pool=own_pool, device=device) as pipe:
        for _ in range(2):
            outs = pipe.run_batches(views)
        assert pipe.stats.staging["input"] == "pinned in place"
        assert all(np.array_equal(o, reference(v, mix.rounds)) for o, v in zip(outs, views))
        assert is_pinned(x[:1]) and is_pinned(x) == (parts == "both ends")
        for _ in range(2):
            y = pipe.run(x)
            assert pipe.stats.staging["input"] == "ring"
            assert np.array_equal(y, reference(x, mix.rounds))
