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

A short list, ``run_batches`` of at most SMALL_LIST_MAX_BATCHES batches and PLAIN_MAX_BYTES
in all, is the same case for several batches (:func:`run_small_list`): a pipelined run of
a few small batches was mostly its fixed costs (bulk blocks, events, threads), 0.14-0.54x
the naive loop.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any, Callable

import numpy as np

from ..cuda.interop import HostKind, like_input
from .pageable import split_ranges
from .plan import host_address
from .stats import PipelineStats
from .tensors import TensorCompute, check_rows
from .tuning import MIN_SPLIT_CHUNK_BYTES

PLAIN_MAX_BYTES = 2 * MIN_SPLIT_CHUNK_BYTES  # (chunk="auto" splits no input under this: it runs as one batch)
# A short list: at most this many batches (and PLAIN_MAX_BYTES in all). Measured on H100 hosts
# (session 22): 2-16 batches of 64-256 KiB 1.6-5x faster plainly than pipelined; lists of 64-127
# batches 0.73-1.26x over five hosts, 0.84-0.88x where a GPU-bound layer's kernels overlapped on the
# pipeline's three streams (p137, p138)
SMALL_LIST_MAX_BATCHES = 16
# A longer list runs plainly or pipelined as measured (list_paths.py) when its batches are
# small: at most this many bytes a batch on average, and in all (a plain run holds the
# list's inputs and outputs in pinned memory until its one wait)
LONG_LIST_MEAN_BYTES = 1 << 20
LONG_LIST_MAX_BYTES = 64 << 20


def small_batches(total_bytes: int, batches: int) -> bool:
    """Whether a longer list of ``batches`` holding ``total_bytes`` is one of small batches
    (LONG_LIST_MEAN_BYTES a batch on average, LONG_LIST_MAX_BYTES in all)."""
    return total_bytes <= LONG_LIST_MAX_BYTES and total_bytes <= LONG_LIST_MEAN_BYTES * batches


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
            y, call_s, host_dtype, give_back = _call(tc, fw, xh, b.in_shape, b.index)
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
              pinned_output: Callable[[tuple[int, ...], np.dtype], np.ndarray | None],
              ) -> tuple[Any, float, float] | None:
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
                if type(out) is not torch.Tensor:  # (a subclass, e.g. a Parameter: a plain tensor, as pipelined)
                    out = out.as_subclass(torch.Tensor)
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
                   cache_met: Callable[[np.ndarray], bool], take_pinned: Callable[[int], np.ndarray | None],
                   copier: Any, outs: list[np.ndarray] | None = None, grouped_uploads: bool = False,
                   out_addresses: list[int] | None = None) -> tuple[list[Any], float, float, float] | None:
    """``run_batches(xs)`` of a list small in all, decided before anything else of a run is
    made (executor ``StreamPipeline._run_small_list``), on the caller's current stream with
    one wait: each batch to the device, ``f`` of it, and ``y`` at once into pinned memory
    (non-blocking, so that a compute that reuses its output buffer, or a CUDA graph's
    static output, is read before the next call); after the wait, pageable outputs copied
    from there. The last batch's pageable output is copied straight in, a copy that waits
    as ``.cpu()`` does (the run's wait is due then anyway: a list of one batch takes no
    pinned block). No ring, bulk block, lane buffers, timing events or threads: a short list's
    pipelined run is their fixed cost (session 22, p137: 2 batches of 64 KiB, 0.7 ms
    against 0.1 ms for the naive loop; longer lists: SMALL_LIST_MAX_BATCHES).

    Outputs of the input's kind, new or the caller's ``outs`` (host views, their rows and
    layout checked already; each checked against its ``y`` as a pipelined run checks it;
    ``out_addresses``: theirs, where read already); new outputs pinned (views of the pool's
    blocks) when every input is pinned by its owner, else views of one new pageable array
    laid out as the pinned blocks they were staged in (one copy per block, no address read
    per output: ``ndarray.ctypes`` took 5-6 us an output on an H200 host, two of them a
    third of fullpipe's own time a batch over 4000 tiny batches, session 54). As with
    ``np.split``, an output kept keeps that array alive. ``take_pinned(nbytes)``: a uint8
    array of the pinned pool, or None when it is full (then a batch's copy waits, into its
    pageable output). None, having done nothing,
    for a mix of pinned and pageable inputs, or pinned inputs or outputs the pin cache's
    ranges meet (``cache_met``). Returns (the outputs: new ones, or None for each of
    ``outs``; the seconds in the calls; the run's seconds; the seconds of its one wait).

    ``grouped_uploads`` (a long list, executor ``_run_list``): pageable inputs go up in
    groups (:class:`_GroupedUploads`) instead of one pageable copy per batch, each of which
    waits for the stream: over a long list those waits leave the GPU idle while the host
    makes each next call.

    ``copier`` (a pageable.HostCopier): after the wait, the outputs staged in pinned memory
    go to their pageable arrays on its threads, an array to a thread (``copy_many``): into
    new arrays that copy is the kernel's first-touch page faults, which run in parallel
    (86 MB into 40 new arrays: 54 ms on one thread, 7.6 on eight; an H100 host, session 34,
    p234), and nothing else runs then to take turns with on the GIL."""
    fw = tc.fw
    torch = fw.torch
    t0 = time.perf_counter()
    xhs = [_host_tensor(torch, a, k.torch_dtype if k.reinterpreted else None) for a, k in zip(arrays, kinds)]
    pinned = [xh.is_pinned() for xh in xhs]
    all_pinned = all(pinned)
    if (not all_pinned and any(pinned)) or (all_pinned and any(map(cache_met, arrays))):
        return None
    dst_pinned = None
    if outs is not None:
        dst_pinned = [torch.from_numpy(o).is_pinned() for o in outs]
        if any(p and cache_met(o) for p, o in zip(dst_pinned, outs)):
            return None
    numpy_output = kinds[0].library != "torch"
    staging = _PinnedCarver(take_pinned, sum(a.nbytes for a in arrays))
    # (the output or its pinned stage, shape, dtype, give_back, (block, offset) in the stage's blocks or None)
    staged: list[tuple[np.ndarray | None, tuple[int, ...], np.dtype, Any, tuple[int, int] | None]] = []
    call_s = waited_s = 0.0
    i: int | None = 0
    with _on_device(torch, fw.device_index):
        try:
            # (a copy from pageable memory waits for the stream first, CUDA's rule: the host
            # runs at most a batch ahead. Staged through pinned memory instead, a short list
            # ran 8-16 % slower: p139, session 22; a long list goes up in groups)
            uploads = (_GroupedUploads.make(torch, fw.device, arrays, kinds[0], take_pinned)
                       if grouped_uploads and not pinned[0] else None)
            first: tuple[Any, Any] | None = None
            last = len(arrays) - 1
            for i, (xh, a) in enumerate(zip(xhs, arrays)):
                xd = None if uploads is None else uploads.device_input(i)
                y, dt, host_dtype, give_back = _call(tc, fw, xh, a.shape, i, xd)
                call_s += dt
                shape = tuple(y.shape)
                if first is None:
                    if numpy_output and give_back is not None and outs is None:
                        raise TypeError(numpy_cannot_hold(give_back))
                    first = (host_dtype, shape[1:])
                elif host_dtype != first[0]:
                    raise ValueError(f"batch {i}: the compute returned {host_dtype} rows of shape {shape[1:]}; "
                                     f"the first batch returned {first[0]} rows of shape {first[1]}")
                if outs is not None and (outs[i].shape != shape or outs[i].dtype != host_dtype):
                    raise ValueError(out_mismatch(i, outs[i], shape, host_dtype))
                place = None
                if dst_pinned is not None and dst_pinned[i]:
                    stage = outs[i]  # (the caller's pinned output: straight in)
                elif i == last and (outs is not None or not all_pinned):
                    stage = None  # (the last pageable output: straight in, as .cpu() does; the wait is due anyway)
                else:
                    stage, place = staging.view(shape, host_dtype, a.nbytes)
                if stage is None:  # (or the pinned pool is full: into a pageable output, a copy PyTorch waits for)
                    stage = np.empty(shape, host_dtype) if outs is None else outs[i]
                    t_copy = time.perf_counter()
                    _copy_into(torch, stage, give_back, y, non_blocking=False)
                    if i == last:  # (this copy waited for the stream's work: the run's wait)
                        waited_s = time.perf_counter() - t_copy
                    staged.append((None if outs is not None else stage, shape, host_dtype, give_back, None))
                    continue
                _copy_into(torch, stage, give_back, y, non_blocking=True)
                staged.append((stage, shape, host_dtype, give_back, place))
            i = None  # (what the wait reports is no one batch's)
            t_wait = time.perf_counter()
            torch.cuda.current_stream(fw.device).synchronize()
            wait_s = waited_s + time.perf_counter() - t_wait
        except BaseException as exc:
            _failed(exc, torch, fw, i, None, f"one of {len(arrays)} (run plainly: a list of small batches, on "
                    "the caller's stream); that stream was waited for" if i is not None else
                    f"the wait of a list of {len(arrays)} small batches run plainly (an error of any of its "
                    "batches' work on the caller's stream)")
            raise
    made: list[Any] = []
    copies: list[tuple[int, int, int]] = []  # (to, from, bytes): pinned stages into pageable outputs
    host, at_block = None, []  # new pageable outputs: one array, each pinned block's bytes at at_block[k]
    if outs is None and not all_pinned and staging.blocks:
        host, at_block, copies = _one_array_for(staging, copier.threads)
    for j, (stage, shape, host_dtype, give_back, place) in enumerate(staged):
        if outs is not None:
            if stage is not None and stage is not outs[j]:  # (same shape and dtype, both C-contiguous)
                to = host_address(outs[j]) if out_addresses is None else out_addresses[j]
                copies.append((to, staging.address(place), stage.nbytes))  # type: ignore[arg-type]
            made.append(None)
        elif all_pinned or place is None:  # (pinned views, or already its own array)
            made.append(like_input(stage, kinds[j], torch_dtype=give_back))
        else:
            at = at_block[place[0]] + place[1]
            out = host[at:at + stage.nbytes].view(host_dtype).reshape(shape)  # type: ignore[index, union-attr]
            made.append(like_input(out, kinds[j], torch_dtype=give_back))
    copier.copy_many(copies)
    return made, call_s, time.perf_counter() - t0, wait_s


def _one_array_for(carver: "_PinnedCarver", threads: int) -> tuple[np.ndarray, list[int], list[tuple[int, int, int]]]:
    """New pageable outputs staged in ``carver``'s pinned blocks: one array laid out as those
    blocks (the bytes cut from each, one block after the other), where each block's bytes
    start in it, and the copies (to, from, bytes) that fill it, in pieces for ``threads``
    threads (a new array's first-touch page faults then run in parallel too)."""
    host = np.empty(max(sum(carver.used), 1), np.uint8)
    base = at = host.ctypes.data
    at_block: list[int] = []
    copies: list[tuple[int, int, int]] = []
    for (_, addr), used in zip(carver.blocks, carver.used):
        at_block.append(at - base)
        copies += [(at + a, addr + a, b - a) for a, b in split_ranges(used, threads)]
        at += used
    return host, at_block, copies


class _PinnedCarver:
    """A short list's outputs in pinned memory, cut from few blocks of the pinned pool (one
    take per block, not per output: a take is ~15 us and at least 64 KiB). Each block is
    sized for the outputs still to come, estimated from those so far (their bytes per input
    byte); another is taken when one is full. ``view`` returns (None, None) once the pool has
    refused a take (``take`` noted it; the run does not ask again)."""

    ALIGN = 256

    def __init__(self, take: Callable[[int], np.ndarray | None], input_bytes: int):
        self.take, self.input_left = take, input_bytes
        self.blocks: list[tuple[np.ndarray, int]] = []  # (block, its address), in the order taken
        self.used: list[int] = []  # the bytes cut from each block (whole ALIGN steps)
        self.out_bytes = self.in_bytes = 0
        self.refused = False

    def view(self, shape: tuple[int, ...], dtype: np.dtype, in_bytes: int
             ) -> tuple[np.ndarray | None, tuple[int, int] | None]:
        """An output's place: (its view, (its block's index, its offset there))."""
        nbytes = math.prod(shape) * dtype.itemsize
        self.out_bytes += nbytes
        self.in_bytes += in_bytes
        self.input_left -= in_bytes
        if self.refused:
            return None, None
        if not self.blocks or self.used[-1] + nbytes > self.blocks[-1][0].nbytes:
            ahead = int(self.out_bytes / max(self.in_bytes, 1) * self.input_left * 1.25)  # (the rest, roughly)
            block = self.take(nbytes + ahead + self.ALIGN)
            if block is None:
                self.refused = True
                return None, None
            self.blocks.append((block, block.ctypes.data))
            self.used.append(0)
        at = self.used[-1]
        self.used[-1] = at + (max(nbytes, 1) + self.ALIGN - 1) // self.ALIGN * self.ALIGN
        k = len(self.blocks) - 1
        return self.blocks[k][0][at:at + nbytes].view(dtype).reshape(shape), (k, at)

    def address(self, place: tuple[int, int]) -> int:
        """The host address of the output at ``place`` (view's answer)."""
        return self.blocks[place[0]][1] + place[1]


class _GroupedUploads:
    """A long list's pageable inputs on the device, uploaded group by group on the caller's
    stream: a group's batches (about ``GROUP_BYTES``, or ``GROUP_BATCHES`` batches) copied
    into one pinned block from the pinned pool, sent in one H2D, each batch a view of the
    group's device copy. A group is staged when its first batch is called for, after the
    calls of the group before it are enqueued, so the host's copies overlap the GPU's work.

    All batches share one dtype (the list's checks) and are packed back to back, so the
    device copy splits into them at element boundaries. ``make`` returns None when the
    pinned pool refuses the block (then each batch is copied from pageable memory)."""

    GROUP_BYTES = 2 << 20
    GROUP_BATCHES = 32

    def __init__(self, torch: Any, device: Any, arrays: list[np.ndarray], kind: HostKind, host: np.ndarray):
        self.torch, self.arrays = torch, arrays
        self.dtype = arrays[0].dtype
        self.in_dtype = kind.torch_dtype if kind.reinterpreted else None
        self.host = host.view(self.dtype)  # (the whole list, back to back, filled group by group)
        self.device_block = torch.empty_like(torch.from_numpy(self.host), device=device)
        self.starts = np.cumsum([0] + [a.size for a in arrays]).tolist()  # (elements)
        self.views: dict[int, Any] = {}

    @classmethod
    def make(cls, torch: Any, device: Any, arrays: list[np.ndarray], kind: HostKind,
             take_pinned: Callable[[int], np.ndarray | None]) -> "_GroupedUploads | None":
        host = take_pinned(sum(a.nbytes for a in arrays))
        return None if host is None else cls(torch, device, arrays, kind, host)

    def device_input(self, i: int) -> Any:
        """Batch ``i`` on the device (its group uploaded first if it is not yet)."""
        view = self.views.pop(i, None)
        if view is None:
            self._upload_group_from(i)
            view = self.views.pop(i)
        return view

    def _upload_group_from(self, first: int) -> None:
        arrays, starts = self.arrays, self.starts
        last, nbytes = first, 0
        while last < len(arrays) and (last == first or (nbytes + arrays[last].nbytes <= self.GROUP_BYTES
                                                        and last - first < self.GROUP_BATCHES)):
            nbytes += arrays[last].nbytes
            last += 1
        group = arrays[first:last]
        lo, hi = starts[first], starts[last]
        np.concatenate([a.reshape(-1) for a in group], out=self.host[lo:hi])  # (C-contiguous: memmoves)
        dev = self.device_block[lo:hi]
        dev.copy_(self.torch.from_numpy(self.host[lo:hi]), non_blocking=True)
        row_shape = group[0].shape[1:]
        if all(a.shape[1:] == row_shape for a in group):  # (the common case: split by rows, views shaped)
            parts = dev.view((-1,) + row_shape).split([a.shape[0] for a in group])
        else:
            parts = [part.view(a.shape) for part, a in zip(dev.split([a.size for a in group]), group)]
        for j, part in enumerate(parts, first):
            self.views[j] = part if self.in_dtype is None else part.view(self.in_dtype)


def _copy_into(torch: Any, dst: np.ndarray, give_back: Any, y: Any, non_blocking: bool) -> None:
    """``y`` into the host array ``dst`` (its bytes; ``give_back``: y's torch dtype when
    ``dst`` carries it as integers)."""
    d = torch.from_numpy(dst)
    (d if give_back is None else d.view(give_back)).copy_(y, non_blocking=non_blocking)


def plain_stats(bytes_in: int, bytes_out: int, wall_s: float, call_s: float, batches: int = 1,
                wait_s: float | None = None) -> PipelineStats:
    """A plain run's stats: one stream (the caller's), host time per batch in the calls
    (``compute_call``), in the wait for the stream at the end (``wait``, when given) and the
    rest (``rest``: the copies, the checks, and the wait when not given)."""
    per_batch_us = wall_s * 1e6 / batches
    call_us = call_s * 1e6 / batches
    wait_us = 0.0 if wait_s is None else wait_s * 1e6 / batches
    host_us = {"compute_call": call_us}
    if wait_s is not None:
        host_us["wait"] = wait_us
    host_us["rest"] = max(per_batch_us - call_us - wait_us, 0.0)
    return PipelineStats(batches=batches, bytes_in=bytes_in, bytes_out=bytes_out, streams=1,
                         staging={"input": "plain", "output": "plain"}, wall_ms=wall_s * 1e3,
                         enqueue_us_per_batch=per_batch_us - wait_us, loop_us_per_batch=per_batch_us - wait_us,
                         host_us=host_us)


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


def _call(tc: TensorCompute, fw: Any, xh: Any, in_shape: tuple[int, ...], index: int = 0, xd: Any = None
          ) -> tuple[Any, float, Any, Any]:
    """x to the device (``xd``: already there), ``f(x)`` and the checks of ``y``: (y, the
    call's seconds, the host NumPy dtype of y, the torch dtype to give back or None).
    ``index``: the batch's in its run (its layout, for batches of several arrays)."""
    if xd is None:
        xd = xh.to(device=fw.device, non_blocking=True)
    t0 = time.perf_counter()
    y = tc.call_fn(xd, index)
    call_s = time.perf_counter() - t0
    y, shape, dtype, _ = fw.output(y, None)
    check_rows(shape, in_shape)
    host_dtype, give_back = fw.host_dtype(dtype)
    return y, call_s, host_dtype, give_back


def _failed(exc: BaseException, torch: Any, fw: Any, index: int | None, rows: tuple[int, int] | None,
            how: str = "the run's only batch (run plainly: one small batch, on the caller's stream); that stream "
                       "was waited for") -> None:
    """The failure path: nothing of this run left in flight, and a note naming the batch
    (``index`` None: no one batch; the note says where instead)."""
    try:
        torch.cuda.current_stream(fw.device).synchronize()
    except Exception:  # noqa: BLE001 - a sticky CUDA error raises here again: the first one is the news
        pass
    where = "" if index is None else f"batch {index}" + (f" (rows {rows[0]}:{rows[1]})" if rows else "") + ", "
    try:
        exc.add_note(f"fullpipe.StreamPipeline: failed at {where}{how}")
        if index is not None:
            exc.batch_index = index  # type: ignore[attr-defined]
    except Exception:  # some exception types refuse new attributes
        pass
