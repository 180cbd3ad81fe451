"""Pipeline stages across processes (fullpipe.pipeline.distributed) on the CPU: gloo, one
spawned process per stage, compared with the same stage functions run in one process.

The stage factories live at module level: the spawned processes unpickle them by name."""

from __future__ import annotations

import multiprocessing
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from fullpipe.pipeline import distributed as pd  # noqa: E402
from fullpipe.pipeline.schedule import bubble_fraction  # noqa: E402

WIDTH = 6


def mixing_stage(rank, world_size, device):
    """Stage r: a seeded r-specific linear map and a nonlinearity; the middle stage of three
    changes the dtype (float64 out) and the last one the shape (a column per stage)."""
    w = torch.randn(WIDTH, WIDTH, generator=torch.Generator().manual_seed(100 + rank), dtype=torch.float64)

    def stage(m, x):
        y = torch.tanh(x.to(torch.float64) @ w) + 0.01 * m
        if rank == world_size - 1 and world_size > 2:
            return torch.cat([y, y[:, :1] * rank], dim=1).to(torch.float32)
        return y if rank == 1 else y.to(torch.float32)

    return stage


def failing_stage(rank, world_size, device):
    inner = mixing_stage(rank, world_size, device)

    def stage(m, x):
        if rank == 1 and m == 2:
            raise ValueError("boom in the test stage")
        return inner(m, x)

    return stage


def stalling_stage(rank, world_size, device):
    def stage(m, x):
        if rank == 1:
            time.sleep(60)  # far beyond the test's timeout: rank 0's sends are never taken
        return x

    return stage


def token_batches(counts, seed=0):
    """Variable-length micro-batches (tokens x WIDTH), host arrays and tensors mixed."""
    rng = np.random.default_rng(seed)
    out = []
    for i, n in enumerate(counts):
        a = rng.standard_normal((n, WIDTH)).astype(np.float32)
        out.append(a if i % 2 else torch.from_numpy(a))
    return out


def assert_same_outputs(got, want):
    assert len(got) == len(want)
    for m, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, f"micro-batch {m}: {g.shape} {g.dtype} vs {w.shape} {w.dtype}"
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-7, msg=lambda s: f"micro-batch {m}: {s}")


def test_header_round_trip_and_refusals():
    for shape in [(), (0, WIDTH), (3,), (2, 3, 4, 5, 1, 1, 2, 7)]:
        for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.bool):
            h = pd.decode_header(pd.encode_header(pd.PAYLOAD, 5, 2, torch.zeros(shape, dtype=dtype)))
            assert (h.kind, h.microbatch, h.origin_rank, h.dtype, h.shape) == (pd.PAYLOAD, 5, 2, dtype, shape)
    end = pd.decode_header(pd.encode_header(pd.END, 17, 0))
    assert (end.kind, end.microbatch) == (pd.END, 17)
    err = pd.decode_header(pd.encode_header(pd.ERROR, 3, 1, message_len=42))
    assert (err.kind, err.microbatch, err.origin_rank, err.message_len) == (pd.ERROR, 3, 1, 42)
    with pytest.raises(ValueError, match="dimensions"):
        pd.encode_header(pd.PAYLOAD, 0, 0, torch.zeros((1,) * 9))
    with pytest.raises(TypeError, match="complex128"):
        pd.encode_header(pd.PAYLOAD, 0, 0, torch.zeros(2, dtype=torch.complex128))
    with pytest.raises(ValueError, match="not a stage header"):
        pd.decode_header(torch.arange(len(pd.encode_header(pd.END, 0, 0))))


def test_two_ranks_variable_shapes_equal_one_process():
    mbs = token_batches([5, 0, 13, 1, 8, 3])
    result = pd.spawn_stages(2, mixing_stage, mbs, timeout=30)
    assert_same_outputs(result.outputs, pd.run_single_process(2, mixing_stage, mbs))
    assert [s.rank for s in result.stats] == [0, 1]
    for s in result.stats:
        assert s.microbatches == len(mbs) and len(s.compute_s) == len(s.done_s) == len(mbs)
        assert s.bubble_fraction == bubble_fraction(2, len(mbs))
        assert all(b >= a for a, b in zip(s.done_s, s.done_s[1:])) and s.span_s >= s.done_s[-1]
        assert min(s.compute_s) >= 0 and min(s.recv_wait_s) >= 0


def test_three_ranks_dtype_and_shape_change_with_a_window_of_one_and_prefetch():
    """The smallest send window and receives posted two ahead: the order of waits must
    not deadlock, and the outputs do not change."""
    mbs = token_batches([4, 9, 1, 0, 6, 2, 7], seed=1)
    result = pd.spawn_stages(3, mixing_stage, mbs, window=1, prefetch=2, timeout=30)
    want = pd.run_single_process(3, mixing_stage, mbs)
    assert want[0].shape == (4, WIDTH + 1)  # the last stage widened it: shapes follow the data
    assert_same_outputs(result.outputs, want)
    assert [s.microbatches for s in result.stats] == [len(mbs)] * 3


def test_a_failing_stage_names_its_rank_and_microbatch_and_leaves_no_process():
    t0 = time.monotonic()
    with pytest.raises(pd.StageError) as info:
        pd.spawn_stages(3, failing_stage, token_batches([3, 4, 5, 6, 7, 8]), timeout=60, grace=2.0)
    elapsed = time.monotonic() - t0
    err = info.value
    assert type(err) is pd.StageError and (err.rank, err.microbatch) == (1, 2)
    assert str(err).startswith("pipeline stage failed on rank 1, micro-batch 2: ValueError: boom in the test stage")
    # rank 2 heard of it from rank 1's error header (it did not wait for a timeout)
    assert "--- rank 2 of 3 (upstream): ValueError: boom in the test stage" in str(err)
    assert elapsed < 30, f"took {elapsed:.1f} s: the failure did not stop the others quickly"
    assert multiprocessing.active_children() == []


def test_a_stalled_stage_times_out_the_rank_that_waits_for_it():
    t0 = time.monotonic()
    with pytest.raises(pd.BoundaryError) as info:
        pd.spawn_stages(2, stalling_stage, token_batches([2, 2, 2, 2]), window=1, timeout=1.5, grace=0.5)
    elapsed = time.monotonic() - t0
    assert info.value.rank == 0 and "to rank 1" in str(info.value)
    assert elapsed < 25, f"took {elapsed:.1f} s"
    assert multiprocessing.active_children() == []


@pytest.fixture
def one_rank_group():
    with pd.stage_process(0, 1, backend="gloo", timeout=10, master_addr="127.0.0.1", master_port=pd.free_port()):
        yield


def test_one_rank_in_process_runs_checks_and_names_the_microbatch(one_rank_group):
    runner = pd.StageRunner(lambda m, x: x * 2 + m, timeout=10)
    out = runner.run(token_batches([2, 0, 3]))
    assert [o.shape for o in out] == [(2, WIDTH), (0, WIDTH), (3, WIDTH)]
    torch.testing.assert_close(out[2], token_batches([2, 0, 3])[2] * 2 + 2)
    assert runner.stats.microbatches == 3 and runner.stats.bubble_fraction == 0.0
    with pytest.raises(ValueError, match="rank 0 takes the micro-batches"):
        runner.run(None)
    bad = pd.StageRunner(lambda m, x: x.numpy() if m == 1 else x, timeout=10)
    with pytest.raises(pd.StageError, match="rank 0, micro-batch 1: the stage function returned ndarray") as info:
        bad.run(token_batches([1, 1, 1]))
    assert info.value.microbatch == 1
    with pytest.raises(pd.StageError, match="micro-batch 0 is not a tensor or host array"):
        runner.run([object()])


def test_stage_process_refuses_bad_options_before_joining():
    with pytest.raises(ValueError, match="nccl_high_priority is for backend='nccl'"):
        with pd.stage_process(0, 1, backend="gloo", nccl_high_priority=True, master_addr="127.0.0.1", master_port=1):
            pass
    with pytest.raises(ValueError, match="both master_addr and master_port"):
        with pd.stage_process(0, 1, master_addr="127.0.0.1"):
            pass
    with pytest.raises(ValueError, match="needs the CUDA device"):
        with pd.stage_process(0, 1, backend="nccl", master_addr="127.0.0.1", master_port=1):
            pass
    assert not dist.is_initialized()
