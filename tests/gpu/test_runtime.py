"""GPU tests of the runtime layer: launches, streams, host functions, events."""

from __future__ import annotations

import time

import numpy as np
import pytest

from fullpipe.cuda import compiler, events, hostfn, memory, streams
from fullpipe.cuda.launch import launch

pytestmark = pytest.mark.gpu

SPIN_NS = 20_000_000  # 20 ms: far longer than any launch latency


@pytest.fixture(scope="module")
def probes(device):
    return compiler.compile_package_kernel("cuda/probes.cu", device=device)


def _stamps(probes, stream, buf, ns=SPIN_NS, blocks=1):
    launch(stream, probes.kernel("spin_stamp"), blocks, 32, np.uint64(ns), buf)


def _read(buf_arr, stream):
    return buf_arr.to_numpy(stream)


def test_device_facts_are_sane(device):
    f = device.facts
    assert f.sm_count > 0 and f.copy_engines >= 1 and f.max_resident_grids == 128
    assert f.shared_memory_per_block_optin >= f.shared_memory_per_block
    assert f.arch == f"sm_{f.compute_capability[0]}{f.compute_capability[1]}"
    assert any("copy engine" in line for line in f.implications())


def test_launch_without_cluster(device, probes, stream, pool):
    n = 1000
    out = memory.device_empty(n, np.float32, stream, pool)
    memory.memset_d8(out.ptr, 0xFF, out.nbytes, stream)  # poison: NaN everywhere
    launch(stream, probes.kernel("iota_add"), (n + 255) // 256, 256, out.owner, np.float32(0.5), np.int32(n))
    got = out.to_numpy(stream)
    np.testing.assert_array_equal(got, 0.5 + np.arange(n, dtype=np.float32))


def test_launch_with_cluster(device, probes, stream, pool):
    if not device.facts.cluster_launch:
        pytest.skip("clusters need compute capability 9.0")
    blocks, cluster = 16, 4
    out = memory.device_empty(3 * blocks, np.int32, stream, pool)
    memory.memset_d8(out.ptr, 0xFF, out.nbytes, stream)
    launch(stream, probes.kernel("cluster_probe"), blocks, 32, out.owner, cluster=cluster)
    got = out.to_numpy(stream).reshape(blocks, 3)
    assert list(got[:, 2]) == [cluster] * blocks  # cluster size seen by every block
    assert sorted(got[:, 1]) == sorted(list(range(cluster)) * (blocks // cluster))
    assert len(set(got[:, 0])) == blocks // cluster


def test_launch_with_more_than_48k_dynamic_shared_memory(device, probes, stream, pool):
    nbytes = min(200 * 1024, device.facts.shared_memory_per_block_optin)
    out = memory.device_empty(2, np.uint32, stream, pool)
    launch(stream, probes.kernel("dynamic_smem_sum"), 1, 256, out.owner, shared_mem=nbytes)
    got = out.to_numpy(stream)
    words = nbytes // 4
    assert got[1] == nbytes
    assert got[0] == np.uint32((words * (words - 1) // 2) & 0xFFFFFFFF)


def test_grid_not_multiple_of_cluster_is_a_value_error(probes, stream, pool):
    out = memory.device_empty(30, np.int32, stream, pool)
    with pytest.raises(ValueError, match="multiple of cluster"):
        launch(stream, probes.kernel("cluster_probe"), 10, 32, out.owner, cluster=4)


def _overlap_with_legacy(device, probes, pool, blocking: bool) -> tuple[float, float, float, float]:
    s = streams.create_stream(device, blocking=blocking)
    a = memory.device_empty(2, np.uint64, s, pool)
    b = memory.device_empty(2, np.uint64, s, pool)
    s.sync()
    legacy = streams.legacy_default_stream()
    _stamps(probes, legacy, a.owner)
    _stamps(probes, s, b.owner)
    device.synchronize()
    ta, tb = a.to_numpy(s), b.to_numpy(s)
    return float(ta[0]), float(ta[1]), float(tb[0]), float(tb[1])


def test_nonblocking_stream_overlaps_legacy_default_stream(device, probes, pool):
    a0, a1, b0, b1 = _overlap_with_legacy(device, probes, pool, blocking=False)
    overlap = min(a1, b1) - max(a0, b0)
    assert overlap > 0.5 * SPIN_NS, f"expected concurrency, overlap {overlap/1e6:.2f} ms"


def test_blocking_stream_serializes_with_legacy_default_stream(device, probes, pool):
    a0, a1, b0, b1 = _overlap_with_legacy(device, probes, pool, blocking=True)
    assert b0 >= a1, f"blocking stream started {(a1-b0)/1e6:.2f} ms before the legacy kernel ended"


def test_host_functions_run_in_stream_order_after_prior_work(device, probes, stream, pool):
    n = 256
    out = memory.device_empty(n, np.float32, stream, pool)
    host = memory.pinned_empty(n, np.float32)
    seen: list[tuple[int, float]] = []
    calls = []
    for i in range(20):
        launch(stream, probes.kernel("iota_add"), 1, 256, out.owner, np.float32(i * 1000), np.int32(n))
        memory.copy_d2h(host, out.ptr, stream)
        # The host function sees the copy that precedes it: stream order holds.
        calls.append(hostfn.launch_host_func(stream, lambda i=i: seen.append((i, float(host[7])))))
    stream.sync()
    for c in calls:
        c.result(timeout=5)
    assert seen == [(i, i * 1000 + 7.0) for i in range(20)]
    assert hostfn.pending_count() == 0


def test_host_function_that_calls_cuda_is_refused_not_deadlocked(device, stream):
    call = hostfn.launch_host_func(stream, lambda: events.record(stream))
    stream.sync()
    with pytest.raises(RuntimeError, match="inside a host function"):
        call.result(timeout=5)
    with pytest.raises(RuntimeError, match="inside a host function"):
        hostfn.raise_pending()


def test_event_timing_agrees_with_host_clock(device, probes, stream, pool):
    buf = memory.device_empty(2, np.uint64, stream, pool)
    stream.sync()
    spin_ns = 50_000_000
    t0 = time.perf_counter()
    e0 = events.record(stream, timing=True)
    _stamps(probes, stream, buf.owner, ns=spin_ns)
    e1 = events.record(stream, timing=True)
    e1.sync()
    host_ms = (time.perf_counter() - t0) * 1e3
    gpu_ms = events.elapsed_ms(e0, e1)
    assert gpu_ms >= spin_ns / 1e6
    assert abs(gpu_ms - host_ms) <= 0.05 * host_ms + 1.0, (gpu_ms, host_ms)


def test_cross_stream_wait_orders_work(device, probes, pool):
    s1, s2 = streams.create_stream(device), streams.create_stream(device)
    a = memory.device_empty(2, np.uint64, s1, pool)
    b = memory.device_empty(2, np.uint64, s1, pool)
    s1.sync()
    _stamps(probes, s1, a.owner, ns=10_000_000)
    events.wait(s2, events.record(s1))
    _stamps(probes, s2, b.owner, ns=1_000_000)
    s2.sync()
    ta, tb = a.to_numpy(s1), b.to_numpy(s1)
    assert tb[0] >= ta[1]


def test_pinned_and_device_array_roundtrip(device, stream, pool):
    rng = np.random.default_rng()
    src = memory.pinned_empty((64, 33), np.float32)
    src[...] = rng.standard_normal(src.shape, dtype=np.float32)
    assert memory.is_pinned(src) and not memory.is_pinned(np.ones(10))
    d = memory.device_empty(src.shape, src.dtype, stream, pool)
    d.copy_from_host(src, stream)
    np.testing.assert_array_equal(d.to_numpy(stream), src)
    with pytest.raises(ValueError, match="size mismatch"):
        d.copy_from_host(np.zeros(3, np.float32), stream)


def test_stream_priority_validation(device):
    lo, hi = device.facts.stream_priority_range
    streams.create_stream(device, priority=hi)
    with pytest.raises(ValueError, match="outside"):
        streams.create_stream(device, priority=lo + 1)


def test_torch_tensors_are_viewed_without_copy(device, stream):
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)
    view = memory.as_device_array(t)
    assert view.ptr == t.data_ptr() and view.shape == (3, 4) and view.dtype == np.float32
    back = torch.as_tensor(view, device="cuda")
    assert back.data_ptr() == t.data_ptr()
    with pytest.raises(ValueError, match="C-contiguous"):
        memory.as_device_array(t.t())
    with pytest.raises(TypeError, match="host"):
        memory.as_device_array(np.ones(3))


def test_cli_info_on_gpu(device):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "fullpipe", "info", "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    import json

    facts = json.loads(proc.stdout)
    assert facts["sm_count"] == device.facts.sm_count and facts["implications"]


def test_device_pool_is_its_own_and_returns_to_zero(device, stream):
    from fullpipe.cuda.pool import DevicePool

    pool = DevicePool(device, release_threshold="max")
    before = pool.stats()
    arrays = [pool.empty((1 << 20,), np.float32, stream) for _ in range(8)]
    assert pool.stats().used_bytes >= 8 * 4 * (1 << 20)
    for a in arrays:
        pool.free_array(a, stream)
    stream.sync()
    after = pool.stats()
    assert after.used_bytes == before.used_bytes and after.allocations == 0
    assert after.reserved_bytes > 0  # threshold "max": memory stays in the pool
    pool.release_threshold = 0
    pool.trim(0)
    assert pool.stats().reserved_bytes == 0
    with pytest.raises(ValueError):
        pool.release_threshold = -1
