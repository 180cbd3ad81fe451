"""One small batch, run plainly: upload, call, download, wait, on the caller's stream.

A pipeline overlaps the copies of some batches with the compute of others. A run of one
batch has nothing to overlap, and the machinery that does the overlapping (the staging
ring and its threads, slot signals, lane buffers, timing events, the output's place in
a ring slot) then costs far more than the work: ``pipe.run(x)`` of a 256 KiB torch
tensor through ``x * 2`` took 0.9 ms pinned and 1.7 ms pageable on an H100 host, against
80-95 us for the naive ``f(x.cuda()).cpu()`` (session 21, ``.dev/p129.py``).

So a :meth:`~fullpipe.pipeline.StreamPipeline.run` of a PyTorch tensor function whose
input is one batch of at most :data:`PLAIN_MAX_BYTES` (an input too small to be worth
cutting: ``chunk="auto"`` keeps inputs under 8 MiB whole) runs as the naive loop would,
on the caller's current stream (the naive call's; a side stream made the same call 20 %
slower from pageable memory, 113 against 91 us, p131):

    x on the device (PyTorch's copy: from pageable memory it stages through the driver)
    y = f(x)
    the host output (the caller's ``out``, or a new one: pinned from the pool for a pinned
    input, as a pipelined run makes it) <- y, a copy PyTorch waits for

What stays as in a pipelined run: the checks of ``y`` (a CUDA tensor on the pipeline's
device, one row per input row), the output's kind, dtype and pinning, the failure note
naming the batch, ``pipe.stats`` (``staging`` says "plain"). What it does not do: the
pipeline's device pool (``x`` and ``y`` live in PyTorch's caching allocator, as they would
in the naive loop), per-stage timing. Not for ``graph=True``, CuPy functions, the stream
form, ``timing=True`` or a ``staging=`` other than "auto": those ask for the pipeline's
own path. Nor for inputs ``torch.from_numpy`` cannot take as they are (read-only arrays,
NumPy bfloat16) or ranges the pin cache pinned only in part (PyTorch's copy would take them
for pinned): the pipeline handles those.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .stats import PipelineStats
from .tensors import TensorCompute, check_rows
from .tuning import MIN_SPLIT_CHUNK_BYTES

PLAIN_MAX_BYTES = 2 * MIN_SPLIT_CHUNK_BYTES  # (chunk="auto" splits no input under this: it runs as one batch)


def run_plain(tc: TensorCompute, b: Any, x_np: np.ndarray, in_dtype: Any, outputs: Any,
              usage: Any) -> PipelineStats:
    """Run batch ``b`` (all of ``x_np``: writable, of a dtype NumPy and torch share;
    ``in_dtype``: the torch dtype its bytes are, for a bfloat16 input carried as integers,
    else None) through ``tc``'s function on the caller's current stream of the pipeline's
    device (made the current device for the call, as a pipelined run's stream makes it),
    its output placed by ``outputs`` (executor._Outputs). Returns the run's stats."""
    fw = tc.fw
    torch = fw.torch
    t0 = time.perf_counter()
    xh = torch.from_numpy(x_np)
    if in_dtype is not None:
        xh = xh.view(in_dtype)
    with torch.cuda.device(fw.device_index):
        return _call(tc, fw, torch, b, xh, outputs, usage, t0)


def _call(tc: TensorCompute, fw: Any, torch: Any, b: Any, xh: Any, outputs: Any, usage: Any,
          t0: float) -> PipelineStats:
    try:
        xd = xh.to(device=fw.device, non_blocking=True)
        tc_ = time.perf_counter()
        y = tc.call_fn(xd)
        call_s = time.perf_counter() - tc_
        y, shape, dtype, _ = fw.output(y, None)
        check_rows(shape, b.in_shape)
        host_dtype, give_back = fw.host_dtype(dtype)
        outputs.begin_execute([b], None)
        outputs.place(b, shape, host_dtype, give_back, usage)
        dst = torch.from_numpy(b.dst)
        if give_back is not None:
            dst = dst.view(give_back)
        dst.copy_(y)  # (blocking: PyTorch waits for it, and for the call before it on the stream)
    except BaseException as exc:
        try:
            torch.cuda.current_stream(fw.device).synchronize()  # (nothing of this run left in flight)
        except Exception:  # noqa: BLE001 - a sticky CUDA error raises here again: the first one is the news
            pass
        _annotate_plain(exc, b)
        raise
    wall = time.perf_counter() - t0
    return PipelineStats(batches=1, bytes_in=b.in_bytes, bytes_out=b.dst.nbytes, streams=1,
                         staging={"input": "plain", "output": "plain"}, wall_ms=wall * 1e3,
                         enqueue_us_per_batch=wall * 1e6, loop_us_per_batch=wall * 1e6,
                         host_us={"compute_call": call_s * 1e6})


def _annotate_plain(exc: BaseException, b: Any) -> None:
    where = f"batch {b.index}" + (f" (rows {b.rows[0]}:{b.rows[1]})" if b.rows else "")
    try:
        exc.add_note(f"fullpipe.StreamPipeline: failed at {where}, the run's only batch (run plainly: one small "
                     "batch, on the caller's stream); that stream was waited for")
        exc.batch_index = b.index  # type: ignore[attr-defined]
    except Exception:  # some exception types refuse new attributes
        pass
