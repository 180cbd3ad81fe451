"""Pipeline stages across processes (and hosts): one process per stage, the stage boundary
through ``torch.distributed`` send/recv (NCCL between GPUs, gloo on the CPU).

Rank r of a ``world_size``-rank group runs stage r of a linear pipeline. Rank 0 takes the
micro-batches; every rank applies its ``stage_fn(microbatch_index, tensor) -> tensor`` and
sends the result to rank r + 1; the last rank returns the outputs in order.

    with stage_process(rank, world, backend="nccl", device=rank):   # joins, then leaves the group
        runner = StageRunner(my_stage_fn, device=rank)
        outputs = runner.run(microbatches if rank == 0 else None)   # a list on the last rank
        print(runner.stats)

    result = spawn_stages(2, factory, microbatches, backend="nccl")  # one host, one process a GPU

How a micro-batch crosses (rank r to r + 1):

- a small header first, always on a gloo group (a CPU tensor): kind, micro-batch index,
  dtype code and shape. Shapes may differ per micro-batch (a different token count each
  time); the receiver learns the shape from the header, allocates, and posts the payload
  receive. The header is host data on both sides: no GPU-to-host copy, no host wait on a
  GPU, only the wait for the sender's host to have sent it, which runs ahead of its GPU.
- then the payload, ``isend`` on the stage's stream: NCCL's own stream for this peer
  waits for the work already on the stage stream (the tensor is ready), then moves it.
  The stage stream never waits for a send, so micro-batch m + 1's compute runs while m
  is on the wire. Up to ``window`` sends are in flight; each sent tensor is kept until
  its send is seen complete (the host blocks only when the window is full).
- the receiver posts the payload ``irecv`` with its receive stream current, an empty
  stream, so NCCL's receive waits for nothing on this GPU; only the stage stream waits
  for it (``work.wait()`` is a stream wait with NCCL), just before the stage function
  runs. On a GPU the receive of m + 1 is posted before the stage's kernels for m are
  enqueued (``prefetch``): NCCL's kernels need SMs on both GPUs, and a receive queued
  behind a stage that fills every SM cannot start before that stage ends.

So in steady state the GPU of stage r computes micro-batch m + 1 while m moves to r + 1
and m + 2 arrives from r - 1, with no host synchronization per micro-batch: the host
waits only for headers and when the send window is full. What two H200s measured:
``docs/notes/multi-gpu-distributed.md``.

Failures: a stage function that raises on rank r at micro-batch m makes rank r raise
:class:`StageError` (rank r, micro-batch m) and send an error header downstream, so the
later ranks raise :class:`UpstreamError` naming rank r and m at once. Earlier ranks,
whose sends are never taken, raise :class:`BoundaryError` after ``timeout`` seconds (the
process group's timeout is the same). :func:`spawn_stages` reports the root cause and
ends the other processes after a short grace.

Needs PyTorch with torch.distributed (the rest of fullpipe does not).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime
import io
import os
import queue as queue_module
import socket
import statistics
import time
import traceback
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch
import torch.distributed as dist

from .schedule import bubble_fraction, fill_drain

# NVLink multicast (NVLS) stays off: on the lent multi-GPU machines a program that uses it
# can put the host's shared GPUs out of service. Set in every stage process spawned here.
NVLINK_MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                        "NVSHMEM_DISABLE_NVLS": "1"}

# Header: int64[_HEADER_LEN] = magic, kind, micro-batch (count for END), origin rank,
# dtype code (message length for ERROR), ndim, dims[_MAX_NDIM].
_MAGIC = 0x46505354  # "FPST"
_MAX_NDIM = 8
_HEADER_LEN = 6 + _MAX_NDIM
PAYLOAD, END, ERROR = 1, 2, 3
# gloo matches a receive with the next send of the same tag from that peer.
_TAG_HEADER, _TAG_PAYLOAD, _TAG_MESSAGE = 1, 2, 3
# dtype codes: append only (both ends of a boundary must agree).
_DTYPES = tuple(d for d in (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
    torch.int32, torch.int64, torch.bool, torch.complex64, getattr(torch, "float8_e4m3fn", None),
    getattr(torch, "float8_e5m2", None)) if d is not None)
_POLL_S = 50e-6  # host poll interval while waiting on an NCCL work or a CUDA event


class StageError(RuntimeError):
    """A pipeline stage failed: ``rank`` and ``microbatch`` (None when not in a micro-batch)
    say where, ``detail`` what."""

    def __init__(self, rank: int, microbatch: int | None, detail: str):
        self.rank, self.microbatch, self.detail = rank, microbatch, detail
        where = f"rank {rank}" + ("" if microbatch is None else f", micro-batch {microbatch}")
        super().__init__(f"pipeline stage failed on {where}: {detail}")

    def __reduce__(self):
        return (type(self), (self.rank, self.microbatch, self.detail))


class UpstreamError(StageError):
    """Raised on a later rank when an earlier one failed: ``rank`` and ``microbatch`` are
    the failing rank's."""


class BoundaryError(StageError):
    """A wait at a stage boundary failed (timed out, or the peer went away): ``rank`` is
    the rank that waited, ``microbatch`` the one it waited for."""


# ---------------------------------------------------------------------------- headers

def encode_header(kind: int, microbatch: int, origin_rank: int, tensor: torch.Tensor | None = None,
                  message_len: int = 0) -> torch.Tensor:
    """The header that precedes a payload (or announces the end, or an error)."""
    h = torch.zeros(_HEADER_LEN, dtype=torch.int64)
    h[0], h[1], h[2], h[3] = _MAGIC, kind, microbatch, origin_rank
    if kind == PAYLOAD:
        if tensor.dtype not in _DTYPES:
            raise TypeError(f"a stage output of dtype {tensor.dtype} cannot cross a boundary "
                            f"(supported: {', '.join(str(d) for d in _DTYPES)})")
        if tensor.dim() > _MAX_NDIM:
            raise ValueError(f"a stage output has {tensor.dim()} dimensions; at most {_MAX_NDIM} cross a boundary")
        h[4], h[5] = _DTYPES.index(tensor.dtype), tensor.dim()
        h[6:6 + tensor.dim()] = torch.tensor(tensor.shape, dtype=torch.int64)
    elif kind == ERROR:
        h[4] = message_len
    return h


@dataclasses.dataclass(frozen=True)
class Header:
    kind: int
    microbatch: int
    origin_rank: int
    dtype: torch.dtype | None
    shape: tuple[int, ...]
    message_len: int


def decode_header(h: torch.Tensor) -> Header:
    v = h.tolist()
    if len(v) != _HEADER_LEN or v[0] != _MAGIC or v[1] not in (PAYLOAD, END, ERROR):
        raise ValueError(f"not a stage header: {v}")
    kind, mb, origin = v[1], v[2], v[3]
    if kind == PAYLOAD:
        if not 0 <= v[4] < len(_DTYPES) or not 0 <= v[5] <= _MAX_NDIM:
            raise ValueError(f"bad dtype code or rank in stage header: {v}")
        return Header(kind, mb, origin, _DTYPES[v[4]], tuple(v[6:6 + v[5]]), 0)
    return Header(kind, mb, origin, None, (), v[4] if kind == ERROR else 0)


# ---------------------------------------------------------------------------- stats

@dataclasses.dataclass
class StageStats:
    """What one rank did in one :meth:`StageRunner.run`. On a GPU the per-micro-batch times
    come from CUDA events on the stage stream (read once, after the run); on the CPU from
    the host clock.

    - ``recv_wait_s[m]``: how long the stage waited for micro-batch m's input (the stage
      stream's wait for the receive; on rank 0 the copy of the input to the device).
    - ``compute_s[m]``: the stage function's time.
    - ``done_s[m]``: when micro-batch m's stage function finished, from the run's start.
    - ``host_header_wait_s`` / ``host_send_wait_s``: host time blocked waiting for headers
      from the previous rank / for sends to complete (full window, final drain).
    - ``bubble_fraction``: the fill-drain bubble of this pipeline with equal stages (the
      schedule's ideal), to compare with ``idle_fraction`` = 1 - compute / span.
    """

    rank: int
    world_size: int
    backend: str
    device: str
    microbatches: int
    recv_wait_s: list[float]
    compute_s: list[float]
    done_s: list[float]
    span_s: float
    host_header_wait_s: float
    host_send_wait_s: float
    bubble_fraction: float | None

    @property
    def idle_fraction(self) -> float:
        return 1.0 - sum(self.compute_s) / self.span_s if self.span_s > 0 else 0.0

    @property
    def period_s(self) -> float | None:
        """Median time between successive micro-batches' completions (steady-state pace)."""
        gaps = [b - a for a, b in zip(self.done_s, self.done_s[1:])]
        return statistics.median(gaps) if gaps else None


# ---------------------------------------------------------------------------- process group

def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def stage_process(rank: int, world_size: int, *, backend: str = "gloo", device: Any = None,
                  timeout: float = 60.0, master_addr: str | None = None, master_port: int | None = None,
                  nccl_high_priority: bool = False):
    """Join the default process group as ``rank`` of ``world_size`` and destroy it on the way
    out. Rendezvous at ``master_addr:master_port`` when given, else through the MASTER_ADDR
    and MASTER_PORT variables (as torchrun sets them). With ``backend="nccl"`` the CUDA
    ``device`` becomes current first. ``timeout`` (seconds) is the group's timeout for
    every operation. ``nccl_high_priority``: NCCL's streams get high priority, so its
    kernels take SMs ahead of the stage's pending blocks."""
    init_method = None
    if master_addr is not None or master_port is not None:
        if master_addr is None or master_port is None:
            raise ValueError("give both master_addr and master_port, or neither")
        init_method = f"tcp://{master_addr}:{master_port}"
    if backend == "nccl":
        if device is None:
            raise ValueError("backend='nccl' needs the CUDA device of this rank (device=...)")
        torch.cuda.set_device(_cuda_device(device))
    options = None
    if nccl_high_priority:
        if backend != "nccl":
            raise ValueError("nccl_high_priority is for backend='nccl'")
        options = dist.ProcessGroupNCCL.Options()
        options.is_high_priority_stream = True
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=timeout), pg_options=options)
    try:
        yield
    finally:
        dist.destroy_process_group()


# ---------------------------------------------------------------------------- the runner

@dataclasses.dataclass
class _Sent:
    microbatch: int
    header_work: Any
    payload_work: Any  # None for an empty tensor
    header: torch.Tensor
    tensor: torch.Tensor  # kept alive until the send is seen complete


class StageRunner:
    """Runs this rank's stage of a linear pipeline over the default process group (one
    process per stage; rank r is stage r). Every rank constructs its runner at the same
    point (with NCCL the constructor creates a gloo group for headers, a collective call).

    ``stage_fn(microbatch_index, tensor) -> tensor`` runs on ``device`` (CUDA with NCCL, the
    CPU with gloo); on a GPU it runs with the runner's own stage stream current, so its
    kernels go there. ``window``: sends in flight before the host waits for the oldest.
    ``prefetch``: receives posted ahead of the micro-batch being computed (default 1 on a
    GPU, so the next transfer is queued before this stage's kernels; 0 on the CPU, where
    it would only make a rank wait for the next header before computing).
    ``timeout``: seconds any wait may take before :class:`BoundaryError`.
    """

    def __init__(self, stage_fn: Callable[[int, torch.Tensor], torch.Tensor], *, device: Any = None,
                 window: int = 4, prefetch: int | None = None, timeout: float = 60.0):
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("StageRunner needs an initialized default process group "
                               "(use stage_process(...) or torch.distributed.init_process_group)")
        if not callable(stage_fn):
            raise TypeError(f"stage_fn must be callable, got {type(stage_fn).__name__}")
        if window < 1 or timeout <= 0 or (prefetch is not None and prefetch < 0):
            raise ValueError(f"need window >= 1, prefetch >= 0 and timeout > 0 (got {window}, {prefetch}, {timeout})")
        self.stage_fn, self.window, self.timeout = stage_fn, window, float(timeout)
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.backend = str(dist.get_backend())
        self.nccl = "nccl" in self.backend
        if self.nccl:
            self.device = torch.device("cuda", torch.cuda.current_device()) if device is None else _cuda_device(device)
        else:
            self.device = torch.device("cpu" if device is None else device)
            if self.device.type != "cpu":
                raise ValueError(f"backend {self.backend!r} moves CPU tensors; use backend='nccl' for {self.device}")
        self.cuda = self.device.type == "cuda"
        self.prefetch = (1 if self.cuda else 0) if prefetch is None else prefetch
        # Headers go through gloo (host memory on both ends); with a gloo world the world does.
        self._header_group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout)) \
            if self.nccl else None
        if self.cuda:
            self.stream = torch.cuda.Stream(self.device)        # the stage function's stream
            self._recv_stream = torch.cuda.Stream(self.device)  # current while posting receives
        self.stats: StageStats | None = None
        self._connect()

    # -- setup and teardown

    def _connect(self) -> None:
        """With NCCL, make each neighbour pair's communicator now (it is created on the
        first send/recv between them) so the first micro-batch does not pay for it."""
        if not self.nccl:
            return
        works = []
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            if self.rank > 0:
                works.append(dist.irecv(torch.empty(1, device=self.device), src=self.rank - 1))
            if self.rank < self.world_size - 1:
                works.append(dist.isend(torch.zeros(1, device=self.device), dst=self.rank + 1))
            for w in works:
                self._wait_host(w, "connecting to the neighbouring ranks", None, nccl=True)

    def close(self) -> None:
        """Destroy the header group this runner created (the default group stays)."""
        if self._header_group is not None and dist.is_initialized():
            dist.destroy_process_group(self._header_group)
        self._header_group = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- one run

    def run(self, microbatches: Iterable[Any] | None = None) -> list[torch.Tensor] | None:
        """Run every micro-batch through this rank's stage. Rank 0 passes the micro-batches
        (torch tensors or host arrays, any shapes); the other ranks pass nothing. Returns
        the outputs in order on the last rank (on its device, ready on the caller's
        stream), None elsewhere."""
        first, last = self.rank == 0, self.rank == self.world_size - 1
        if first != (microbatches is not None):
            raise ValueError("rank 0 takes the micro-batches and the other ranks take none "
                             f"(rank {self.rank} got {'none' if microbatches is None else 'some'})")
        self._in_flight: collections.deque[_Sent] = collections.deque()
        self._posted: collections.deque = collections.deque()  # (micro-batch, work | None, tensor)
        self._next_recv, self._terminal = 0, None
        self._header_wait = self._send_wait = 0.0
        marks: list[tuple[Any, Any, Any]] = []
        outputs: list[torch.Tensor] | None = [] if last else None
        caller = torch.cuda.current_stream(self.device) if self.cuda else None
        m = 0
        with self._on_stage_stream():
            if self.cuda:
                self.stream.wait_stream(caller)  # inputs the caller made on its stream
            start = self._mark()
            try:
                items = iter(microbatches) if first else None
                while True:
                    t0 = self._mark()
                    if first:
                        item = next(items, _NO_MORE)
                        if item is _NO_MORE:
                            break
                        x = self._to_device(item, m)
                    else:
                        x = self._receive(m)
                        if x is None:
                            break
                    t1 = self._mark()
                    y = self._call_stage(m, x)
                    t2 = self._mark()
                    marks.append((t0, t1, t2))
                    if last:
                        outputs.append(y)
                    else:
                        self._send(m, y)
                    m += 1
                if not last:
                    self._send_end(m)
                    while self._in_flight:
                        self._retire_oldest()
                end = self._finish()
            except Exception as exc:
                err = exc if isinstance(exc, StageError) else StageError(self.rank, m, f"{type(exc).__name__}: {exc}")
                self._send_error_downstream(err)
                if err is exc:
                    raise
                raise err from exc
        self.stats = self._stats(m, start, end, marks)
        if self.cuda and outputs:
            caller.wait_stream(self.stream)
            for y in outputs:
                if y.numel():
                    y.record_stream(caller)
        return outputs

    # -- pieces of a run

    def _on_stage_stream(self):
        if not self.cuda:
            return contextlib.nullcontext()
        stack = contextlib.ExitStack()
        stack.enter_context(torch.cuda.device(self.device))
        stack.enter_context(torch.cuda.stream(self.stream))
        return stack

    def _mark(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        ev = torch.cuda.Event(enable_timing=True)
        ev.record(self.stream)
        return ev

    def _to_device(self, item: Any, m: int) -> torch.Tensor:
        try:
            t = item if isinstance(item, torch.Tensor) else torch.as_tensor(np.asarray(item))
        except Exception as exc:
            raise StageError(self.rank, m, f"micro-batch {m} is not a tensor or host array: "
                                           f"{type(exc).__name__}: {exc}") from exc
        return t.to(self.device, non_blocking=True) if t.device != self.device else t

    def _call_stage(self, m: int, x: torch.Tensor) -> torch.Tensor:
        try:
            y = self.stage_fn(m, x)
        except Exception as exc:
            raise StageError(self.rank, m, f"{type(exc).__name__}: {exc}") from exc
        if not isinstance(y, torch.Tensor):
            raise StageError(self.rank, m, f"the stage function returned {type(y).__name__}, not a torch.Tensor")
        if y.device != self.device:
            raise StageError(self.rank, m, f"the stage function returned a tensor on {y.device}, "
                                           f"not on this stage's device {self.device}")
        return y

    def _send(self, m: int, y: torch.Tensor) -> None:
        y = y.contiguous()
        try:
            header = encode_header(PAYLOAD, m, self.rank, y)
        except (TypeError, ValueError) as exc:
            raise StageError(self.rank, m, str(exc)) from exc
        dst = self.rank + 1
        hw = dist.isend(header, dst, group=self._header_group, tag=_TAG_HEADER)
        # With NCCL, isend makes NCCL's stream wait for the stage stream (y is ready there).
        pw = None if y.numel() == 0 else dist.isend(y, dst, **self._payload_kw())
        self._in_flight.append(_Sent(m, hw, pw, header, y))
        if self.nccl:  # gloo's works report completion only once waited on
            while self._in_flight and self._in_flight[0].payload_work is not None \
                    and self._in_flight[0].payload_work.is_completed():
                self._retire_oldest()
        while len(self._in_flight) > self.window:
            self._retire_oldest()

    def _send_end(self, count: int) -> None:
        header = encode_header(END, count, self.rank)
        work = dist.isend(header, self.rank + 1, group=self._header_group, tag=_TAG_HEADER)
        self._in_flight.append(_Sent(count, work, None, header, header))

    def _retire_oldest(self) -> None:
        s = self._in_flight[0]
        t = time.perf_counter()
        what = f"the send of micro-batch {s.microbatch} to rank {self.rank + 1}"
        self._wait_host(s.header_work, what, s.microbatch, nccl=False)
        if s.payload_work is not None:
            self._wait_host(s.payload_work, what, s.microbatch, nccl=self.nccl)
        self._send_wait += time.perf_counter() - t
        self._in_flight.popleft()

    def _receive(self, m: int) -> torch.Tensor | None:
        """Micro-batch m from rank - 1, ready on the stage stream; None after the last.

        Before returning m (so before the stage function is enqueued), the receives of the
        next ``prefetch`` micro-batches are posted: on a GPU, NCCL's receive kernel for m + 1
        is then queued ahead of the stage's kernels for m instead of behind them, where a
        stage that fills every SM would keep it from starting until it ends."""
        while self._terminal is None and len(self._posted) < 1 + self.prefetch:
            self._post_next()
        if not self._posted:
            kind, *info = self._terminal
            if kind == END:
                if info[0] != m:
                    raise BoundaryError(self.rank, m, f"rank {self.rank - 1} announced {info[0]} micro-batches "
                                                      f"after sending {m}")
                return None
            origin, mb, message = info
            raise UpstreamError(origin, mb, message)
        mb, work, x = self._posted.popleft()
        if work is not None:
            if self.nccl:
                work.wait()  # a stream wait: the current (stage) stream waits, the host does not
                x.record_stream(self.stream)  # allocated on the receive stream, used on the stage stream
            else:
                self._wait_host(work, f"micro-batch {m} from rank {self.rank - 1}", m, nccl=False)
        return x

    def _post_next(self) -> None:
        """Wait for the next header from rank - 1 (host data, gloo) and post the receive of
        the payload it announces, or note the end or the upstream error it reports."""
        src, j = self.rank - 1, self._next_recv
        header = torch.empty(_HEADER_LEN, dtype=torch.int64)
        t = time.perf_counter()
        self._wait_host(dist.irecv(header, src, group=self._header_group, tag=_TAG_HEADER),
                        f"the header of micro-batch {j} from rank {src}", j, nccl=False)
        self._header_wait += time.perf_counter() - t
        h = decode_header(header)
        if h.kind == END:
            self._terminal = (END, h.microbatch)
            return
        if h.kind == ERROR:
            msg = torch.empty(h.message_len, dtype=torch.uint8)
            if h.message_len:
                self._wait_host(dist.irecv(msg, src, group=self._header_group, tag=_TAG_MESSAGE),
                                f"the error report of rank {h.origin_rank}", j, nccl=False)
            self._terminal = (ERROR, h.origin_rank, None if h.microbatch < 0 else h.microbatch,
                              bytes(msg.tolist()).decode("utf-8", "replace"))
            return
        if h.microbatch != j:
            raise BoundaryError(self.rank, j, f"rank {src} sent micro-batch {h.microbatch} where {j} was due")
        if self.cuda:
            # Posted with the (empty) receive stream current: NCCL's stream then waits for
            # nothing and receives while the stage stream computes.
            with torch.cuda.stream(self._recv_stream):
                x = torch.empty(h.shape, dtype=h.dtype, device=self.device)
                work = dist.irecv(x, src) if x.numel() else None
        else:
            x = torch.empty(h.shape, dtype=h.dtype)
            work = dist.irecv(x, src, tag=_TAG_PAYLOAD) if x.numel() else None
        self._posted.append((j, work, x))
        self._next_recv += 1

    def _payload_kw(self) -> dict:
        return {} if self.nccl else {"tag": _TAG_PAYLOAD}

    def _wait_host(self, work: Any, what: str, m: int | None, *, nccl: bool) -> None:
        """Block the host until ``work`` is complete, at most ``timeout`` seconds."""
        if nccl:  # an NCCL work's wait() is a stream wait: poll it from the host instead
            deadline = time.monotonic() + self.timeout
            while not work.is_completed():
                if time.monotonic() > deadline:
                    raise BoundaryError(self.rank, m, f"waited more than {self.timeout:g} s for {what}")
                time.sleep(_POLL_S)
        try:
            work.wait(datetime.timedelta(seconds=self.timeout)) if not nccl else work.wait()
        except RuntimeError as exc:
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise BoundaryError(self.rank, m, f"{what} did not complete: {first_line}") from exc

    def _finish(self) -> Any:
        """The run's end mark, once everything on the stage stream is done (bounded wait)."""
        end = self._mark()
        if self.cuda:
            deadline = time.monotonic() + self.timeout
            while not end.query():
                if time.monotonic() > deadline:
                    raise BoundaryError(self.rank, None, f"the stage stream did not finish within {self.timeout:g} s "
                                                         "(a receive that never came?)")
                time.sleep(_POLL_S)
        return end

    def _send_error_downstream(self, exc: StageError) -> None:
        """Tell rank + 1 (best effort, bounded wait) so that it stops at once."""
        if self.rank == self.world_size - 1:
            return
        msg = torch.tensor(list(exc.detail.encode("utf-8")[:4000]), dtype=torch.uint8)
        header = encode_header(ERROR, -1 if exc.microbatch is None else exc.microbatch, exc.rank,
                               message_len=msg.numel())
        dst, wait = self.rank + 1, datetime.timedelta(seconds=min(self.timeout, 10.0))
        try:
            works = [dist.isend(header, dst, group=self._header_group, tag=_TAG_HEADER)]
            if msg.numel():
                works.append(dist.isend(msg, dst, group=self._header_group, tag=_TAG_MESSAGE))
            for w in works:
                w.wait(wait)
        except RuntimeError:
            pass  # rank + 1 is gone or stuck: its own timeout names it

    def _stats(self, count: int, start: Any, end: Any, marks: list) -> StageStats:
        def seconds(a: Any, b: Any) -> float:
            return a.elapsed_time(b) / 1e3 if self.cuda else b - a

        return StageStats(
            rank=self.rank, world_size=self.world_size, backend=self.backend, device=str(self.device),
            microbatches=count,
            recv_wait_s=[seconds(t0, t1) for t0, t1, _ in marks],
            compute_s=[seconds(t1, t2) for _, t1, t2 in marks],
            done_s=[seconds(start, t2) for _, _, t2 in marks],
            span_s=seconds(start, end), host_header_wait_s=self._header_wait, host_send_wait_s=self._send_wait,
            bubble_fraction=bubble_fraction(self.world_size, count) if count else None)


_NO_MORE = object()


def _cuda_device(device: Any) -> torch.device:
    d = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    if d.type != "cuda":
        raise ValueError(f"backend 'nccl' moves CUDA tensors; device {d} is not a CUDA device")
    return torch.device("cuda", d.index if d.index is not None else torch.cuda.current_device())


# ---------------------------------------------------------------------------- reference

def run_single_process(world_size: int, stage_factory: Callable[[int, int, torch.device], Callable],
                       microbatches: Sequence[Any], *, device: Any = "cpu") -> list[torch.Tensor]:
    """The same pipeline in one process on one device, stage by stage in fill-drain order:
    the reference the distributed run must equal."""
    device = torch.device(device)
    stages = [stage_factory(r, world_size, device) for r in range(world_size)]
    values = [t if isinstance(t, torch.Tensor) else torch.as_tensor(np.asarray(t)) for t in microbatches]
    values = [t.to(device) for t in values]
    if not values:
        return []
    for tick in fill_drain(world_size, len(values)):
        for step in tick:
            values[step.microbatch] = stages[step.stage](step.microbatch, values[step.microbatch])
    return values


# ---------------------------------------------------------------------------- one host

@dataclasses.dataclass
class SpawnResult:
    outputs: list[torch.Tensor] | None  # the last rank's outputs, on the CPU, in order
    stats: list[StageStats]             # one per rank, in rank order
    wall_s: float                       # the parent's time from start to the last report


@dataclasses.dataclass
class _Spec:
    world_size: int
    port: int
    backend: str
    devices: list[int] | None
    stage_factory: Callable
    microbatches: Any  # a sequence, or a callable(device) -> iterable, for rank 0
    window: int
    prefetch: int | None
    timeout: float
    nccl_high_priority: bool
    return_outputs: bool


def spawn_stages(world_size: int, stage_factory: Callable[[int, int, torch.device], Callable],
                 microbatches: Sequence[Any] | Callable[[torch.device], Iterable[Any]], *,
                 backend: str = "gloo", devices: Sequence[int] | None = None, window: int = 4,
                 prefetch: int | None = None, timeout: float = 60.0, grace: float = 2.0,
                 return_outputs: bool = True, nccl_high_priority: bool = False) -> SpawnResult:
    """Run a ``world_size``-stage pipeline on this host, one spawned process per stage
    (rendezvous on 127.0.0.1 and a free port). ``stage_factory(rank, world_size, device)``
    returns rank's ``stage_fn``; it and ``microbatches`` (a sequence, or a callable that
    makes them on rank 0's device) must pickle. With ``backend="nccl"`` rank r uses CUDA
    device ``devices[r]`` (default: device r).

    Returns the last rank's outputs (moved to the CPU) and every rank's stats. When a rank
    fails, the others get ``grace`` seconds to report, the rest are ended, and the root
    cause is raised as :class:`StageError` (naming the rank and micro-batch), the ranks'
    own tracebacks in its message. No stage process outlives this call."""
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'gloo' or 'nccl', got {backend!r}")
    if backend == "nccl":
        devices = list(range(world_size)) if devices is None else [int(d) for d in devices]
        if len(devices) != world_size:
            raise ValueError(f"{len(devices)} devices for {world_size} ranks")
    elif devices is not None:
        raise ValueError("devices are for backend='nccl' (gloo stages run on the CPU)")
    spec = _Spec(world_size=world_size, port=free_port(), backend=backend, devices=devices,
                 stage_factory=stage_factory, microbatches=microbatches, window=window, prefetch=prefetch,
                 timeout=float(timeout), nccl_high_priority=nccl_high_priority, return_outputs=return_outputs)
    ctx = torch.multiprocessing.get_context("spawn")
    reports = ctx.Queue()
    procs = [ctx.Process(target=_stage_main, args=(rank, spec, reports), name=f"fullpipe-stage-{rank}")
             for rank in range(world_size)]
    t0 = time.perf_counter()
    ok: dict[int, dict] = {}
    errors: dict[int, dict] = {}
    try:
        for p in procs:
            p.start()
        first_error_at = None
        silent_since: dict[int, float] = {}
        while len(ok) + len(errors) < world_size:
            try:
                msg = reports.get(timeout=0.05)
                (ok if msg["ok"] else errors)[msg["rank"]] = msg
            except queue_module.Empty:
                pass
            now = time.monotonic()
            if errors and first_error_at is None:
                first_error_at = now
            if first_error_at is not None and now - first_error_at > grace:
                break
            for rank, p in enumerate(procs):  # a rank that died without a word (killed, crashed)
                if rank in ok or rank in errors or p.is_alive():
                    continue
                silent_since.setdefault(rank, now)
                if now - silent_since[rank] > 1.0:  # its last report may still be in the pipe
                    errors[rank] = {"ok": False, "rank": rank, "origin": rank, "microbatch": None, "kind": "died",
                                    "detail": f"the process exited with code {p.exitcode} without reporting",
                                    "traceback": ""}
        wall = time.perf_counter() - t0
        if not errors:
            for p in procs:
                p.join(timeout=timeout)
    finally:
        _end_processes(procs)
        reports.close()
        reports.join_thread()
    if errors:
        raise _root_cause(errors, world_size)
    outputs = None
    last = ok[world_size - 1]
    if return_outputs:
        outputs = torch.load(io.BytesIO(last["outputs"]), weights_only=True)
    return SpawnResult(outputs, [StageStats(**ok[r]["stats"]) for r in range(world_size)], wall)


def _end_processes(procs: list) -> None:
    """Make sure none of the stage processes outlives spawn_stages (they are ours)."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        if p.pid is None:
            continue
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join()


_KIND_ORDER = ("stage", "other", "boundary", "died", "upstream")  # most likely root cause first


def _root_cause(errors: dict[int, dict], world_size: int) -> StageError:
    best = min(errors.values(), key=lambda e: (_KIND_ORDER.index(e["kind"]), e["rank"]))
    lines = [best["detail"]]
    for rank in sorted(errors):
        e = errors[rank]
        lines.append(f"--- rank {rank} of {world_size} ({e['kind']}): {e['detail']}")
        if e["traceback"]:
            lines.append(e["traceback"].rstrip())
    cls = StageError if best["kind"] != "upstream" else UpstreamError
    cls = BoundaryError if best["kind"] == "boundary" else cls
    return cls(best["origin"], best["microbatch"], "\n".join(lines))


def _stage_main(rank: int, spec: _Spec, reports: Any) -> None:
    """One stage process (spawned): join the group, run the stage, report to the parent."""
    os.environ.update(NVLINK_MULTICAST_OFF)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(spec.port), RANK=str(rank),
                      WORLD_SIZE=str(spec.world_size))
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # one host: gloo talks over loopback
    device = torch.device("cuda", spec.devices[rank]) if spec.backend == "nccl" else torch.device("cpu")
    reported = False

    def report_error(exc: BaseException) -> None:
        nonlocal reported
        if isinstance(exc, StageError):
            kind = ("upstream" if isinstance(exc, UpstreamError) else
                    "boundary" if isinstance(exc, BoundaryError) else "stage")
            origin, mb, detail = exc.rank, exc.microbatch, exc.detail
        else:
            kind, origin, mb, detail = "other", rank, None, f"{type(exc).__name__}: {exc}"
        reports.put({"ok": False, "rank": rank, "origin": origin, "microbatch": mb, "kind": kind,
                     "detail": detail, "traceback": traceback.format_exc()})
        reported = True

    try:
        with stage_process(rank, spec.world_size, backend=spec.backend, device=device, timeout=spec.timeout,
                           master_addr="127.0.0.1", master_port=spec.port, nccl_high_priority=spec.nccl_high_priority):
            try:
                stage_fn = spec.stage_factory(rank, spec.world_size, device)
                with StageRunner(stage_fn, device=device, window=spec.window, prefetch=spec.prefetch,
                                 timeout=spec.timeout) as runner:
                    items = None
                    if rank == 0:
                        items = spec.microbatches(device) if callable(spec.microbatches) else spec.microbatches
                    outputs = runner.run(items)
                    payload = None
                    if outputs is not None and spec.return_outputs:
                        buf = io.BytesIO()
                        torch.save([y.cpu() for y in outputs], buf)
                        payload = buf.getvalue()
                    reports.put({"ok": True, "rank": rank, "stats": dataclasses.asdict(runner.stats),
                                 "outputs": payload})
            except BaseException as exc:
                report_error(exc)
                raise
    except BaseException as exc:
        if not reported:
            report_error(exc)
        raise SystemExit(1)
