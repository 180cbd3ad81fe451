"""Pipeline stages across processes on GPUs: NCCL between two GPUs of one host, one spawned
process per GPU (fullpipe.pipeline.distributed). Needs two GPUs; skips with the reason
otherwise.

With FULLPIPE_DIST_TIMING_JSON set, the overlap test writes what it measured there
(scripts/dist-check prints it as a table)."""

from __future__ import annotations

import json
import multiprocessing
import os
import statistics
import time

import pytest

from ._torch import torch

pytestmark = pytest.mark.gpu

WIDTH = 1024          # correctness: fp32, TF32 off
# Timing: bf16, 128 MiB across the boundary per micro-batch; with a width of 2048 a matmul
# stage and the NCCL transfer take about as long (~0.4 ms each on an H200 pair), far above
# the host's time per micro-batch.
T_TOKENS, T_WIDTH, T_COUNT = 32768, 2048, 24


@pytest.fixture(autouse=True)
def two_gpus(monkeypatch):
    if torch is None:
        pytest.skip("PyTorch is not installed")
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_nccl_available():
        pytest.skip("torch.distributed with NCCL is not available")
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 GPUs for one process per stage over NCCL, found {torch.cuda.device_count()}")
    for name, value in {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}.items():
        monkeypatch.setenv(name, value)  # the stage processes set them too


# -- stage factories (module level: the spawned processes unpickle them by name)

def fp32_matmul_stage(rank, world_size, device):
    torch.backends.cuda.matmul.allow_tf32 = False
    w = (torch.randn(WIDTH, WIDTH, generator=torch.Generator().manual_seed(11 + rank)) / WIDTH ** 0.5).to(device)
    if rank < world_size - 1:
        return lambda m, x: torch.relu(x @ w)
    return lambda m, x: x @ w + m


def bf16_matmul_stage(rank, world_size, device):
    w = (torch.randn(T_WIDTH, T_WIDTH, generator=torch.Generator().manual_seed(rank)) / T_WIDTH ** 0.5)
    w = w.to(device, torch.bfloat16)
    return lambda m, x: x @ w


def bf16_matmul_stage_sm_carveout(rank, world_size, device):
    """The same stage with cuBLASLt told to leave 16 SMs free (for NCCL's kernels): a
    diagnostic, reported beside the plain stage."""
    torch._C._set_sm_carveout_experimental(16)
    return bf16_matmul_stage(rank, world_size, device)


def identity_stage(rank, world_size, device):
    return lambda m, x: x


def timing_inputs(device, count=T_COUNT):
    g = torch.Generator(device=device).manual_seed(5)
    return [torch.randn(T_TOKENS, T_WIDTH, device=device, dtype=torch.bfloat16, generator=g) for _ in range(count)]


# -- tests

def test_nccl_two_ranks_equal_one_gpu_with_variable_token_counts():
    from fullpipe.pipeline.distributed import run_single_process, spawn_stages

    g = torch.Generator().manual_seed(3)
    mbs = [torch.randn(n, WIDTH, generator=g) for n in (1, 77, 512, 0, 1000, 333, 2048, 5)]
    result = spawn_stages(2, fp32_matmul_stage, mbs, backend="nccl", timeout=60)
    one_gpu = [y.cpu() for y in run_single_process(2, fp32_matmul_stage, mbs, device="cuda:0")]
    fp64 = run_single_process(2, _fp64_reference, mbs)
    assert len(result.outputs) == len(mbs)
    for m, (got, ref, exact) in enumerate(zip(result.outputs, one_gpu, fp64)):
        assert got.shape == (mbs[m].shape[0], WIDTH) and got.dtype == torch.float32, m
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5, msg=lambda s: f"micro-batch {m} vs one GPU: {s}")
        torch.testing.assert_close(got, exact.float(), rtol=1e-4, atol=1e-4, msg=lambda s: f"micro-batch {m} vs fp64: {s}")
    assert result.stats[1].microbatches == len(mbs) and result.stats[0].backend == "nccl"
    assert multiprocessing.active_children() == []


def _fp64_reference(rank, world_size, device):
    w = (torch.randn(WIDTH, WIDTH, generator=torch.Generator().manual_seed(11 + rank)) / WIDTH ** 0.5).double()
    if rank < world_size - 1:
        return lambda m, x: torch.relu(x.double() @ w)
    return lambda m, x: x.double() @ w + m


def _median_cuda_ms(fn, reps=20):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def test_nccl_boundary_overlaps_compute():
    """Per micro-batch, two matmul stages with a 128 MiB boundary between them take about
    max(compute, transfer), not their sum: the compute of m + 1 runs while m crosses."""
    from fullpipe.pipeline.distributed import spawn_stages

    # Bounds, measured in this run: one stage's compute alone, and a plain peer copy.
    x = timing_inputs(torch.device("cuda:0"), 1)[0]
    w = bf16_matmul_stage(0, 2, torch.device("cuda:0"))
    compute_ms = _median_cuda_ms(lambda: w(0, x))
    dst = torch.empty_like(x, device="cuda:1")
    dst.copy_(x)
    torch.cuda.synchronize(0), torch.cuda.synchronize(1)
    t = time.perf_counter()
    for _ in range(20):
        dst.copy_(x, non_blocking=True)
    torch.cuda.synchronize(0), torch.cuda.synchronize(1)
    peer_copy_ms = (time.perf_counter() - t) / 20 * 1e3
    del dst

    def pace_ms(factory, **kw):
        r = spawn_stages(2, factory, timing_inputs, backend="nccl", timeout=60, return_outputs=False, **kw)
        return r.stats[1].period_s * 1e3, r

    transfer_ms, _ = pace_ms(identity_stage)
    pipelined_ms, both = pace_ms(bf16_matmul_stage)  # default: the next receive posted before the stage runs
    # Diagnostics beside it: each receive posted only when needed (behind the stage's
    # kernels), NCCL's streams at high priority, and the stage leaving SMs free for NCCL.
    diagnostics = {}
    for name, factory, kw in (("pipelined_no_prefetch_ms", bf16_matmul_stage, {"prefetch": 0}),
                              ("pipelined_nccl_high_priority_ms", bf16_matmul_stage, {"nccl_high_priority": True}),
                              ("pipelined_sm_carveout16_ms", bf16_matmul_stage_sm_carveout, {})):
        try:
            diagnostics[name] = pace_ms(factory, **kw)[0]
        except Exception as exc:  # a diagnostic that cannot run is recorded, not fatal
            diagnostics[name] = None
            diagnostics[name.replace("_ms", "_error")] = f"{type(exc).__name__}: {str(exc)[:300]}"
    nbytes = x.numel() * x.element_size()
    measured = {
        "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "nccl": str(torch.cuda.nccl.version()),
        "tokens": T_TOKENS, "width": T_WIDTH, "microbatches": T_COUNT, "boundary_bytes": nbytes,
        "compute_alone_ms": compute_ms, "peer_copy_ms": peer_copy_ms, "nccl_transfer_ms": transfer_ms,
        "pipelined_ms": pipelined_ms, **diagnostics,
        "rank0_compute_in_pipeline_ms": statistics.median(both.stats[0].compute_s) * 1e3,
        "rank1_compute_in_pipeline_ms": statistics.median(both.stats[1].compute_s) * 1e3,
        "rank1_recv_wait_ms": statistics.median(both.stats[1].recv_wait_s) * 1e3,
        "rank0_host_send_wait_s": both.stats[0].host_send_wait_s,
        "rank1_host_header_wait_s": both.stats[1].host_header_wait_s,
        "bubble_fraction": both.stats[1].bubble_fraction, "rank1_idle_fraction": both.stats[1].idle_fraction,
        "ratio_to_max": pipelined_ms / max(compute_ms, transfer_ms),
        "ratio_to_sum": pipelined_ms / (compute_ms + transfer_ms),
        "nccl_transfer_GBps": nbytes / transfer_ms / 1e6, "peer_copy_GBps": nbytes / peer_copy_ms / 1e6,
    }
    if os.environ.get("FULLPIPE_DIST_TIMING_JSON"):
        with open(os.environ["FULLPIPE_DIST_TIMING_JSON"], "w") as f:
            json.dump(measured, f, indent=1)
    print(json.dumps(measured, indent=1))
    slow, fast = max(compute_ms, transfer_ms), min(compute_ms, transfer_ms)
    assert pipelined_ms < slow + 0.5 * fast, (
        f"{pipelined_ms:.3f} ms per micro-batch with compute {compute_ms:.3f} ms and transfer {transfer_ms:.3f} ms: "
        "less than half of the shorter one is hidden")
    assert multiprocessing.active_children() == []
