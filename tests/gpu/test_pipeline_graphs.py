"""GPU tests of StreamPipeline(graph=True): bit-exact results on fresh random data with
poisoned outputs (pinned and pageable, batches of three shapes, every recycle mode),
the cost per batch printed beside graph=False, a compute that cannot be captured, and
nothing left behind: pool usage, slots, graph memory."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from fullpipe.cuda import driver as drv
from fullpipe.cuda import hostfn
from fullpipe.cuda.memory import pinned_empty
from fullpipe.pipeline import StreamPipeline
from fullpipe.pipeline.graphs import GraphCaptureError
from fullpipe.pipeline.workload import reference

pytestmark = pytest.mark.gpu
POISON = 0xDEADBEEF
SHAPES = (4096, 65_539, 262_147)  # uint32 elements: 16 KiB, ~256 KiB, ~1 MiB (odd sizes on purpose)


def _usage(pipe, pool):
    s = pool.stats()
    r = pipe.resources()
    return (s.used_bytes, s.allocations, r["timing_events_out"], r["pinned_slots_free"], r["running"],
            hostfn.pending_count())


def _graph_mem(device, name="CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT") -> int:
    d = drv.driver()
    dev = drv.call("cuDeviceGet", device.index)
    return int(drv.call("cuDeviceGetGraphMemAttribute", dev, getattr(d.CUgraphMem_attribute, name)))


def _batches(n, seed, pinned):
    """n batches whose sizes are drawn from SHAPES, fresh random data; outputs poisoned.
    Pinned: views into one pinned array each way (their addresses differ per batch)."""
    rng = np.random.default_rng(seed)
    sizes = [int(rng.choice(SHAPES)) for _ in range(n)]
    total = sum(sizes)
    if pinned:
        x, y = pinned_empty(total, np.uint32), pinned_empty(total, np.uint32)
    else:
        x, y = np.empty(total, np.uint32), np.empty(total, np.uint32)
    x[:] = rng.integers(0, 2**32, total, dtype=np.uint32)
    y.fill(POISON)
    bounds = np.cumsum([0] + sizes)
    return ([x[a:b] for a, b in zip(bounds[:-1], bounds[1:])],
            [y[a:b] for a, b in zip(bounds[:-1], bounds[1:])])


@pytest.mark.parametrize("pinned,recycle", [(True, "hostfn"), (False, "hostfn"), (False, "event"),
                                            (False, "pyhostfn")])
def test_graph_runs_are_bit_exact_and_nothing_leaks(device, mix, own_pool, pinned, recycle):
    xs, ys = _batches(300, seed=1, pinned=pinned)
    graph_mem_before = _graph_mem(device)
    reserved_before = _graph_mem(device, "CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT")
    with StreamPipeline(mix, streams=3, slots=4, recycle=recycle, pool=own_pool, device=device,
                        graph="batch", staging="auto" if pinned else "ring") as pipe:
        pipe.run_batches(xs, outs=ys)  # warm: ring, pool, the graphs and (pinned) their stream buffers
        start = _usage(pipe, own_pool)
        graph_mem_runs = []
        for rep in range(6):
            for y in ys:
                y.fill(POISON)
            pipe.run_batches(xs, outs=ys)
            for x, y in zip(xs, ys):
                assert np.array_equal(y, reference(x, mix.rounds))
            g = pipe.stats.graph
            print(f"pinned={pinned} recycle={recycle} run {rep}: {pipe.stats.enqueue_us_per_batch:.2f} us/batch "
                  f"enqueue; {g}")
            assert g["launches"] == 300 and g["fallback_batches"] == 0
            assert pipe.stats.staging == ({"input": "direct", "output": "direct"} if pinned
                                          else {"input": "ring", "output": "ring"})
            # ring graphs' buffers are graph memory; direct graphs' a pool buffer per stream, made
            # by the warm run: the pool's usage does not move from run to run
            assert _usage(pipe, own_pool) == start
            graph_mem_runs.append(_graph_mem(device))
        assert pipe.stats.graph["captures"] == 0  # later runs: every graph cached
        # A graph's allocations stay mapped between launches and the driver reuses them:
        # graph memory in use grows with the graphs and the streams they are launched on
        # (ring graphs rotate over the streams: it may step up over the first runs, in
        # 32 MiB steps on an H100, as launches in flight happen to overlap: once from 64
        # to 96 MiB between the third and fourth runs, session 13), then stays, and is far
        # below one buffer per batch. A leak would grow in every run.
        print(f"graph memory in use after each run: {[m >> 20 for m in graph_mem_runs]} MiB")
        assert graph_mem_runs[5] == graph_mem_runs[4] or graph_mem_runs[4] == graph_mem_runs[3]
        assert max(graph_mem_runs) - graph_mem_before < sum(2 * x.nbytes for x in xs)
    # close() destroyed the execs and gave the device's graph memory back (cuDeviceGraphMemTrim)
    assert _graph_mem(device) == graph_mem_before
    reserved_after = _graph_mem(device, "CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT")
    print(f"graph memory reserved: {reserved_before} bytes before, {reserved_after} after close")
    assert reserved_after <= reserved_before


@pytest.mark.parametrize("pinned", [True, False])
def test_enqueue_cost_with_and_without_graphs(device, mix, own_pool, pinned):
    """Prints the host enqueue cost per batch (16 KiB batches); asserts only correctness."""
    n, k = 2000, 4096
    x = pinned_empty((n, k), np.uint32) if pinned else np.empty((n, k), np.uint32)
    x[:] = np.random.default_rng(2).integers(0, 2**32, x.shape, dtype=np.uint32)
    want = reference(x, mix.rounds)
    for graph in (False, "batch", True):
        y = pinned_empty(x.shape, np.uint32) if pinned else np.empty_like(x)
        with StreamPipeline(mix, streams=3, chunk=1, timing=False, pool=own_pool, device=device,
                            graph=graph) as pipe:
            pipe.run(x, out=y)  # warm (and capture)
            if graph is True:
                pipe.run(x, out=y)  # pinned: the whole run captured; the next run replays it
            y.fill(POISON)
            pipe.run(x, out=y)
            np.testing.assert_array_equal(y, want)
            st = pipe.stats
            print(f"\npinned={pinned} graph={graph}: enqueue {st.enqueue_us_per_batch:.2f} us/batch, loop "
                  f"{st.loop_us_per_batch:.2f} us/batch, {st.throughput_gbps:.2f} GB/s"
                  + (f"; {st.graph['reason']}" if st.graph else ""))


@pytest.mark.parametrize("pinned", [True, False])
def test_a_compute_that_synchronizes_cannot_be_captured_and_nothing_leaks(device, mix, own_pool, pinned):
    def syncing(stream, x, y):
        mix(stream, x, y)
        drv.call("cuStreamSynchronize", stream.handle)  # not capturable

    syncing.input_dtype = np.uint32
    xs, ys = _batches(30, seed=3, pinned=pinned)
    graph_mem_before = _graph_mem(device)
    with StreamPipeline(syncing, streams=3, slots=3, pool=own_pool, device=device, graph=True) as pipe:
        pipe.compute = mix
        pipe.run_batches(xs, outs=ys)  # warm with a capturable compute (and the streams' buffers)
        start = _usage(pipe, own_pool)
        graph_mem_warm = _graph_mem(device)
        pipe.compute = syncing
        with pytest.raises(GraphCaptureError, match="capturable") as info:
            pipe.run_batches(xs, outs=ys)
        print(info.value)
        assert info.value.batch_index == 0
        for s in pipe.streams:
            s.sync()
        assert _usage(pipe, own_pool) == start
        assert _graph_mem(device) <= graph_mem_warm  # the failed capture left no graph memory in use
        pipe.compute = mix  # usable again
        pipe.run_batches(xs, outs=ys)
        for x, y in zip(xs, ys):
            assert np.array_equal(y, reference(x, mix.rounds))
    assert _graph_mem(device) == graph_mem_before


def test_pinned_memory_the_collector_frees_during_a_capture_does_not_break_it(device, mix, own_pool):
    """The collector may run inside a capture (here: the compute calls it). Freeing pinned
    memory there (cuMemFreeHost) would invalidate the capture; fullpipe defers such frees
    to the next safe point. Before that, this failed at batch 0 with
    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (and made the next test fail, at random, on the H200)."""

    def collecting(stream, x, y):
        gc.collect()  # in the first batches, inside their graph capture
        mix(stream, x, y)

    collecting.input_dtype = np.uint32
    xs, ys = _batches(12, seed=11, pinned=False)
    gc.disable()  # the garbage below must wait for the compute's own collect
    try:
        for _ in range(4):
            junk = [pinned_empty(64 * 1024, np.uint8)]
            junk.append(junk)  # a cycle: only the collector frees it
        del junk
        with StreamPipeline(collecting, streams=3, slots=3, pool=own_pool, device=device, graph=True) as pipe:
            pipe.run_batches(xs, outs=ys)
            assert pipe.stats.graph["captures"] > 0 and pipe.stats.graph["fallback_batches"] == 0
    finally:
        gc.enable()
    for x, y in zip(xs, ys):
        assert np.array_equal(y, reference(x, mix.rounds))


def test_a_repeated_pinned_run_is_one_graph_with_a_buffer_per_stream(device, mix, own_pool):
    """graph=True: the third run over the same pinned arrays is one launch of a graph of
    the whole run. Bit-exact on fresh data each run (poisoned outputs). The graph's
    device memory is one pool buffer per stream for the largest batch, held while it
    is cached and given back by reset_graphs(); it maps no graph memory."""
    xs, ys = _batches(300, seed=5, pinned=True)
    largest = max(-(-x.nbytes // 256) * 256 + x.nbytes for x in xs)
    graph_mem_before = _graph_mem(device)
    rng = np.random.default_rng(6)
    with StreamPipeline(mix, streams=3, pool=own_pool, device=device, graph=True) as pipe:
        how = []
        for rep in range(4):
            for x, y in zip(xs, ys):
                x[:] = rng.integers(0, 2**32, x.size, dtype=np.uint32)
                y.fill(POISON)
            graph_mem = _graph_mem(device)
            pipe.run_batches(xs, outs=ys)
            for x, y in zip(xs, ys):
                assert np.array_equal(y, reference(x, mix.rounds))
            g = pipe.stats.graph
            how.append(g["run_graph"])
            r = pipe.resources()
            print(f"run {rep}: {g['run_graph']}, {pipe.stats.enqueue_us_per_batch:.2f} us/batch enqueue, "
                  f"{pipe.stats.loop_us_per_batch:.2f} us/batch loop, run graphs hold {r['run_graph_bytes']} bytes")
            if rep >= 1:
                assert _graph_mem(device) == graph_mem  # no graph memory: the lanes are pool buffers
                assert r["run_graph_bytes"] == 3 * largest == r["graph_lane_bytes"]  # (+ run 0's per-batch graphs')
                assert own_pool.stats().used_bytes == r["run_graph_bytes"] + r["graph_lane_bytes"]
        assert how == ["seen", "captured", "replayed", "replayed"]
        pipe.reset_graphs()
        pipe.streams[0].sync()
        assert own_pool.stats().used_bytes == 0 and pipe.resources()["run_graph_bytes"] == 0
    assert _graph_mem(device) == graph_mem_before
