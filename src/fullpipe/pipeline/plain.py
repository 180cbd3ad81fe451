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

That plain run still went through ``run()``'s checks and records for a pipelined run
(the pin cache's holds, the chunk's tuning, the output's place, the pinned pool's
record): ~110 us of a 256 KiB run's ~280 (p131). :func:`run_small` is the commonest case
decided before any of it (``StreamPipeline._run_small``): an input pageable or pinned by
its owner (not by the pin cache), into a new output, for a function the pipeline has
called before. It is the naive call, ``f(x.to(device)).cpu()`` (a pinned input's output
from the pinned pool), and its stats are made only when read.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable

import numpy as np

from ..cuda.interop import HostKind, like_input
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
    xh = _host_tensor(torch, x_np, in_dtype)
    with _on_device(torch, fw.device_index):
        try:
            y, call_s, host_dtype, give_back = _call(tc, fw, xh, b.in_shape)
            outputs.begin_execute([b], None)
            outputs.place(b, tuple(y.shape), host_dtype, give_back, usage)
            dst = torch.from_numpy(b.dst)
            if give_back is not None:
                dst = dst.view(give_back)
            dst.copy_(y)  # (blocking: PyTorch waits for it, and for the call before it on the stream)
        except BaseException as exc:
            _failed(exc, torch, fw, b.index, b.rows)
            raise
    wall = time.perf_counter() - t0
    return plain_stats(b.in_bytes, b.dst.nbytes, wall, call_s)


def run_small(tc: TensorCompute, x_np: np.ndarray, kind: HostKind, cache_met: bool,
              pinned_output: Callable[[tuple[int, ...], np.dtype], np.ndarray | None]) -> tuple[Any, float, float] | None:
    """``run(x)`` of one small input into a new output, decided before anything else of a
    run is made (executor ``StreamPipeline._run_small``): the naive call and nothing more,
    ``f(x.to(device)).cpu()``, or for an input its owner pinned, ``y`` copied into
    ``pinned_output(shape, dtype)`` (a block of the pinned pool, or None when the pool is
    full: a pageable output). Returns (the output, of the input's kind; the seconds in the
    call; the run's seconds), or None, having done nothing, when PyTorch finds ``x_np``
    pinned and the pin cache's ranges meet it (``cache_met``): the cache pinned it, and a
    run of its own holds the cache's range while it copies it and pins the output by its
    rule (pageable to PyTorch, the copy is a pageable one, whatever the cache holds)."""
    fw = tc.fw
    torch = fw.torch
    t0 = time.perf_counter()
    in_dtype = kind.torch_dtype if kind.reinterpreted else None
    xh = _host_tensor(torch, x_np, in_dtype)
    pinned = xh.is_pinned()  # (as PyTorch's copy below tells it)
    if pinned and cache_met:
        return None
    out_np = None
    with _on_device(torch, fw.device_index):
        try:
            y, call_s, host_dtype, give_back = _call(tc, fw, xh, x_np.shape)
            if kind.library != "torch" and give_back is not None:
                raise TypeError(numpy_cannot_hold(give_back))
            if pinned:
                out_np = pinned_output(tuple(y.shape), host_dtype)
            if out_np is None:  # (blocking, as above; a pipelined run's output never requires grad)
                out = (y.detach() if y.requires_grad else y).cpu()
            else:
                dst = torch.from_numpy(out_np)
                (dst if give_back is None else dst.view(give_back)).copy_(y)  # (blocking)
        except BaseException as exc:
            _failed(exc, torch, fw, 0, (0, x_np.shape[0]))
            raise
    if out_np is not None:
        out = like_input(out_np, kind, torch_dtype=give_back)
    elif kind.library != "torch":
        out = out.numpy()
    return out, call_s, time.perf_counter() - t0


def run_small_list(tc: TensorCompute, arrays: list[np.ndarray], kinds: list[HostKind],
                   cache_met: Callable[[np.ndarray], bool],
                   pinned_output: Callable[[tuple[int, ...], np.dtype], np.ndarray | None],
                   outs: list[np.ndarray] | None = None) -> tuple[list[Any], float, float] | None:
    """``run_batches(xs)`` of a list small in all, decided before anything else of a run is
    made (executor ``StreamPipeline._run_small_list``), as the naive loop would run it but
    with one wait: on the caller's current stream, each batch to the device and ``f`` of it,
    then each ``y`` back to the host. No ring, bulk block, lane buffers, timing events or
    threads: a short list's pipelined run is their fixed cost (session 22, p137: 2 batches of
    64 KiB, 0.7 ms against 0.1 ms for the naive loop; p138: the variable-length encoder
    lists, 127 batches and 4 MB, 1.05-1.2x faster than pipelined, the caller's stream
    0.97-1.09x the pipeline's three). Outputs as :func:`run_small` makes them, for inputs
    all pageable or all pinned by their owner; or into the caller's ``outs`` (host views,
    their rows and layout checked already), each checked against its ``y`` as a pipelined
    run checks it. None, having done nothing, for a mix, or for pinned inputs or outputs the
    pin cache's ranges meet (``cache_met``). Returns (the outputs: new ones, or None for each
    of ``outs``; the seconds in the calls; the run's seconds)."""
    fw = tc.fw
    torch = fw.torch
    t0 = time.perf_counter()
    xhs = [_host_tensor(torch, a, k.torch_dtype if k.reinterpreted else None) for a, k in zip(arrays, kinds)]
    pinned = [xh.is_pinned() for xh in xhs]
    all_pinned = all(pinned)
    if (not all_pinned and any(pinned)) or (all_pinned and any(map(cache_met, arrays))):
        return None
    dsts = None
    if outs is not None:
        dsts = [torch.from_numpy(o) for o in outs]
        dst_pinned = [d.is_pinned() for d in dsts]
        if any(p and cache_met(o) for p, o in zip(dst_pinned, outs)):
            return None
    numpy_output = kinds[0].library != "torch"
    made: list[Any] = []
    call_s = 0.0
    i = 0
    with _on_device(torch, fw.device_index):
        try:
            ys = []
            first: tuple[Any, Any] | None = None
            for i, (xh, a) in enumerate(zip(xhs, arrays)):
                y, dt, host_dtype, give_back = _call(tc, fw, xh, a.shape)
                call_s += dt
                if first is None:
                    if numpy_output and give_back is not None and outs is None:
                        raise TypeError(numpy_cannot_hold(give_back))
                    first = (host_dtype, tuple(y.shape[1:]))
                elif host_dtype != first[0]:
                    raise ValueError(f"batch {i}: the compute returned {host_dtype} rows of shape {tuple(y.shape[1:])}; "
                                     f"the first batch returned {first[0]} rows of shape {first[1]}")
                ys.append((y, host_dtype, give_back))
            for i, (y, host_dtype, give_back) in enumerate(ys):
                # into pageable memory a copy PyTorch waits for; into pinned memory waited for below
                if dsts is not None:
                    if outs[i].shape != tuple(y.shape) or outs[i].dtype != host_dtype:
                        raise ValueError(out_mismatch(i, outs[i], tuple(y.shape), host_dtype))
                    d = dsts[i]
                    (d if give_back is None else d.view(give_back)).copy_(y, non_blocking=dst_pinned[i])
                    made.append(None)
                    continue
                out_np = pinned_output(tuple(y.shape), host_dtype) if all_pinned else None
                if out_np is None:
                    out = (y.detach() if y.requires_grad else y).cpu()
                    made.append(out.numpy() if numpy_output else out)
                else:
                    d = torch.from_numpy(out_np)
                    (d if give_back is None else d.view(give_back)).copy_(y, non_blocking=True)
                    made.append(like_input(out_np, kinds[i], torch_dtype=give_back))
            torch.cuda.current_stream(fw.device).synchronize()
        except BaseException as exc:
            _failed(exc, torch, fw, i, None, f"one of {len(arrays)} (run plainly: a short list of small batches, on "
                    "the caller's stream); that stream was waited for")
            raise
    return made, call_s, time.perf_counter() - t0


def plain_stats(bytes_in: int, bytes_out: int, wall_s: float, call_s: float, batches: int = 1) -> PipelineStats:
    """A plain run's stats: one stream (the caller's), host time per batch in the calls
    (``compute_call``) and the rest (``rest``: the copies, the checks, the wait)."""
    per_batch_us = wall_s * 1e6 / batches
    call_us = call_s * 1e6 / batches
    return PipelineStats(batches=batches, bytes_in=bytes_in, bytes_out=bytes_out, streams=1,
                         staging={"input": "plain", "output": "plain"}, wall_ms=wall_s * 1e3,
                         enqueue_us_per_batch=per_batch_us, loop_us_per_batch=per_batch_us,
                         host_us={"compute_call": call_us, "rest": max(per_batch_us - call_us, 0.0)})


def out_mismatch(i: int, dst: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> str:
    return f"outs[{i}] has shape {dst.shape} and dtype {dst.dtype}; the compute returned {tuple(shape)} {dtype}"


def numpy_cannot_hold(give_back: Any) -> str:
    return (f"the compute returned {give_back}, which a NumPy output cannot hold: return e.g. y.float(), or pass a "
            "torch tensor as input (the output is then a tensor)")


def _host_tensor(torch: Any, x_np: np.ndarray, in_dtype: Any) -> Any:
    xh = torch.from_numpy(x_np)
    return xh if in_dtype is None else xh.view(in_dtype)


def _on_device(torch: Any, index: int) -> Any:
    """The pipeline's device made current for the call (a context; none needed when it is)."""
    return contextlib.nullcontext() if torch.cuda.current_device() == index else torch.cuda.device(index)


def _call(tc: TensorCompute, fw: Any, xh: Any, in_shape: tuple[int, ...]) -> tuple[Any, float, Any, Any]:
    """x to the device, ``f(x)`` and the checks of ``y``: (y, the call's seconds, the host
    NumPy dtype of y, the torch dtype to give back or None)."""
    xd = xh.to(device=fw.device, non_blocking=True)
    t0 = time.perf_counter()
    y = tc.call_fn(xd)
    call_s = time.perf_counter() - t0
    y, shape, dtype, _ = fw.output(y, None)
    check_rows(shape, in_shape)
    host_dtype, give_back = fw.host_dtype(dtype)
    return y, call_s, host_dtype, give_back


def _failed(exc: BaseException, torch: Any, fw: Any, index: int, rows: tuple[int, int] | None,
            how: str = "the run's only batch (run plainly: one small batch, on the caller's stream); that stream "
                       "was waited for") -> None:
    """The failure path: nothing of this run left in flight, and a note naming the batch."""
    try:
        torch.cuda.current_stream(fw.device).synchronize()
    except Exception:  # noqa: BLE001 - a sticky CUDA error raises here again: the first one is the news
        pass
    where = f"batch {index}" + (f" (rows {rows[0]}:{rows[1]})" if rows else "")
    try:
        exc.add_note(f"fullpipe.StreamPipeline: failed at {where}, {how}")
        exc.batch_index = index  # type: ignore[attr-defined]
    except Exception:  # some exception types refuse new attributes
        pass
