"""GPU tests: fullpipe from any thread (issue 14, point 2).

Every worker thread starts with no CUDA context (checked first: otherwise the test
would prove nothing) and never calls set_current: fullpipe's cuda/ layer has to make
the context current where it needs it. Results are checked exactly on fresh random
data with poisoned outputs; the shared pool must end where it started.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from fullpipe.cuda import compiler, hostfn
from fullpipe.cuda import driver as drv
from fullpipe.cuda.device import Device
from fullpipe.cuda.events import create_event, elapsed_ms, record, wait
from fullpipe.cuda.launch import launch
from fullpipe.cuda.memory import copy_d2h, is_pinned, pinned_empty
from fullpipe.cuda.pool import DevicePool
from fullpipe.cuda.streams import create_stream

pytestmark = pytest.mark.gpu

THREADS = 8
POISON = 0xDEADBEEF
MUL = np.uint32(2654435761)

# y = x * MUL + salt (uint32, wraps): exact, and different per thread
SOURCE = r"""
extern "C" __global__ void mul_add(const unsigned int* x, unsigned int* y, unsigned int mul,
                                   unsigned int salt, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * mul + salt;
}
"""


def no_context_here() -> bool:
    from cuda.bindings import driver

    err, ctx = driver.cuCtxGetCurrent()
    return int(err) == 0 and int(ctx) == 0


def run_threads(target, n=THREADS, timeout=120):
    """Start n threads running target(index); re-raise the first failure."""
    errors: list[BaseException] = []

    def body(i):
        try:
            target(i)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,), name=f"fullpipe-test-{i}") for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), f"{t.name} did not finish in {timeout} s (deadlock?)"
    if errors:
        raise errors[0]


def usage(pool):
    s = pool.stats()
    return s.used_bytes, s.allocations


@pytest.fixture(scope="module")
def shared_pool(device):
    p = DevicePool(device, release_threshold="max")
    yield p
    p.close()


def test_workers_start_without_a_context(device):
    seen = []
    run_threads(lambda i: seen.append(no_context_here()), n=2)
    assert seen == [True, True]  # what makes the tests below meaningful


def test_threads_with_own_streams_and_events_on_one_pool(device, shared_pool):
    start = usage(shared_pool)
    arch = compiler.default_arch(device)

    def worker(tid):
        assert no_context_here()
        # compile (cache) and load the module first, before anything made a context current
        kernel = compiler.compile_source(SOURCE, name="threads_mul_add.cu", arch=arch).kernel("mul_add")
        s_in, s_out = create_stream(device), create_stream(device)
        handoff = create_event(device)
        t0, t1 = create_event(device, timing=True), create_event(device, timing=True)
        rng = np.random.default_rng(100 + tid)
        try:
            for it in range(12):
                n = int(rng.integers(1, 300_000))
                x = pinned_empty(n, np.uint32)
                x[:] = rng.integers(0, 2**32, n, dtype=np.uint32)
                y = pinned_empty(n, np.uint32)
                y.fill(POISON)
                dx = shared_pool.empty(n, np.uint32, s_in)  # Buffer-backed DeviceArray
                dy = shared_pool.allocate_ptr(n * 4, s_in)  # the executor's hot path
                record(s_in, t0)
                dx.copy_from_host(x, s_in)
                launch(s_in, kernel, (n + 255) // 256, 256, dx.owner, np.uint64(dy), MUL,
                       np.uint32(tid * 1000 + it), np.int32(n))
                record(s_in, t1)
                record(s_in, handoff)
                wait(s_out, handoff)  # D2H on another stream, ordered by the event
                copy_d2h(y, dy, s_out)
                shared_pool.free_array(dx, s_in)
                shared_pool.free_ptr(dy, s_out)  # after its last use, on the stream that used it
                done = hostfn.launch_host_func(s_out, lambda: None)
                assert done.wait(30), "host function did not run"
                s_out.sync()
                want = x * MUL + np.uint32(tid * 1000 + it)
                np.testing.assert_array_equal(y, want)
                assert elapsed_ms(t0, t1) >= 0
            assert is_pinned(x)
        finally:
            for s in (s_in, s_out):
                s.sync()
                s.close()

    run_threads(worker)
    assert usage(shared_pool) == start
    assert hostfn.pending_count() == 0


def test_each_thread_runs_its_own_stream_pipeline_on_one_pool(device, shared_pool):
    from fullpipe import StreamPipeline
    from fullpipe.pipeline.workload import MixKernel, reference

    mix = MixKernel(device, rounds=3)  # thread-safe: its packed arguments are under a lock
    start = usage(shared_pool)
    leftovers = []

    def worker(tid):
        assert no_context_here()
        rng = np.random.default_rng(200 + tid)
        with StreamPipeline(mix, streams=2, chunk="256KiB", pool=shared_pool, device=device) as pipe:
            for run in range(3):
                n = int(rng.integers(100_000, 1_500_000))
                pinned = run % 2 == 1
                x = pinned_empty(n, np.uint32) if pinned else np.empty(n, np.uint32)
                x[:] = rng.integers(0, 2**32, n, dtype=np.uint32)
                y = pinned_empty(n, np.uint32) if pinned else np.empty(n, np.uint32)
                y.fill(POISON)
                out = pipe.run(x, out=y)
                assert out is y
                np.testing.assert_array_equal(y, reference(x, mix.rounds))
            leftovers.append(pipe.resources())

    run_threads(worker)
    assert usage(shared_pool) == start
    assert hostfn.pending_count() == 0
    assert len(leftovers) == THREADS and all(r["running"] is False for r in leftovers)


def test_a_pipeline_started_in_one_thread_runs_in_another(device, shared_pool):
    """The executor's streams and events come from the first thread; a later run() in a
    thread without a context must still work (the executor calls ensure_current)."""
    from fullpipe import StreamPipeline
    from fullpipe.pipeline.workload import MixKernel, reference

    mix = MixKernel(device, rounds=2)
    rng = np.random.default_rng(7)
    x = rng.integers(0, 2**32, 700_001, dtype=np.uint32)
    with StreamPipeline(mix, streams=3, chunk="128KiB", pool=shared_pool, device=device) as pipe:
        np.testing.assert_array_equal(pipe.run(x), reference(x, mix.rounds))
        results = {}

        def later(i):
            assert no_context_here()
            results[i] = pipe.run(x)

        run_threads(later, n=1)
        np.testing.assert_array_equal(results[0], reference(x, mix.rounds))


def test_device_and_pool_made_in_a_thread_work_everywhere(device):
    made = {}

    def maker(i):
        assert no_context_here()
        dev = Device(0)
        made["facts"] = dev.facts  # queries the driver: needs the context
        made["free"] = dev.memory_info()[0]
        made["pool"] = DevicePool(device, release_threshold=0)

    run_threads(maker, n=1)
    assert made["facts"].sm_count == device.facts.sm_count and made["free"] > 0
    pool = made["pool"]

    def user(i):
        s = create_stream(device)
        buf = pool.allocate(1 << 20, s)
        pool.free(buf, s)
        s.sync()
        s.close()
        pool.trim(0)

    run_threads(user, n=4)
    assert pool.stats().allocations == 0 and pool.stats().used_bytes == 0
    pool.close()


@pytest.mark.parametrize("backend", ["events", "auto"])
def test_trace_capture_in_a_thread(device, backend):
    """Workload, capture and the capture's final wait all in a thread with no context."""
    from fullpipe import trace
    from fullpipe.pipeline.workload import TracedPipeline

    batches = 4
    box = {}

    def worker(i):
        assert no_context_here()
        wl = TracedPipeline(device, batches=batches, batch_bytes=1 << 20)
        try:
            with trace.capture(backend=backend) as tl:
                wl.issue(2)  # no wait of its own: the capture's exit must wait for the GPU
            wl.verify()  # bit-exact against the reference, outputs poisoned: every batch had landed
        finally:
            wl.close()
        box["tl"] = tl

    run_threads(worker, n=1)
    tl = box["tl"]
    assert not any("could not wait for the GPU" in n for n in tl.notes), tl.notes
    kernels = [r for r in tl.records if r.kind == "kernel"]
    copies = [r for r in tl.records if r.kind == "memcpy"]
    if tl.backend == "events":
        assert len(kernels) == batches and len(copies) == 2 * batches, tl.records
    else:
        assert len(kernels) >= batches and len(copies) >= 2 * batches, tl.records


def test_ensure_current_fast_path_costs_no_driver_call(device, shared_pool):
    """After the first call in a thread, allocate_ptr/free_ptr pay a thread-local read
    each: printed as a share of the pair's own cost."""
    import time

    from fullpipe.cuda.device import ensure_current

    s = create_stream(device)
    for _ in range(100):
        shared_pool.free_ptr(shared_pool.allocate_ptr(4096, s), s)
    n = 20_000
    t = time.perf_counter()
    for _ in range(n):
        shared_pool.free_ptr(shared_pool.allocate_ptr(4096, s), s)
    pair_ns = (time.perf_counter() - t) / n * 1e9
    t = time.perf_counter()
    for _ in range(n):
        ensure_current(0)
    check_ns = (time.perf_counter() - t) / n * 1e9
    s.sync()
    s.close()
    print(f"ensure_current fast path {check_ns:.0f} ns; allocate_ptr+free_ptr pair {pair_ns:.0f} ns "
          f"(two checks = {200 * check_ns / pair_ns:.1f} % of the pair)")
    assert drv.uses_real_driver()
    assert check_ns < 0.25 * pair_ns  # a thread-local read, not a driver call
