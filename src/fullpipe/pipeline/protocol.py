"""One batch's enqueue sequence, written once:

    allocate -> H2D -> release the input slot -> compute -> D2H -> signal the output slot -> free

:class:`BatchProtocol` enqueues it for one batch without waiting. The same code
serves every way the executor runs a batch; what differs is data the protocol is
built with, not branches in the executor:

- eager (one stream per batch): each lane's :class:`Route` names the lane's stream
  for every step; memory comes from the pool (``allocate_ptr``/``free_ptr``); a
  ring slot is signalled with ``GpuSignal.arm``.
- ``copy_streams=True``: each lane's Route puts the H2D on the copy-in stream and
  the D2H on the copy-out stream, with two events joining them to the compute
  stream; buffers are freed by :class:`DeferredFree`.
- graph capture (graphs.py): the lane's stream is being captured; memory is the
  driver's stream-ordered allocation on the pool's handle (it becomes graph memory,
  freed inside the graph); a ring slot is signalled with ``arm_in_capture`` (a node
  that signals on every launch); no timing events, no host waits.

docs/notes/2026-11-22-executor-protocol.md has the sequence per mode as a table.
The eager path runs once per batch and counts microseconds: everything is looked
up once per run, and the driver calls go through cuda/hotpath.py.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

from ..cuda.hotpath import HotPath
from ..cuda.memory import DeviceArray

DEVICE_ALIGN = 256  # the output view starts here after the input, in one allocation


@dataclasses.dataclass(frozen=True)
class Route:
    """Where one lane's batches go: the stream of each step (objects for the compute
    callable and the slot signals, driver handles for the hot path) and the events
    that join the steps when they are on different streams (None: one stream)."""

    h2d_stream: Any
    stream: Any  # the compute stream: what compute(stream, x, y) gets
    d2h_stream: Any
    h2d: Any  # handles as HotPath takes them
    compute: Any
    d2h: Any
    h2d_done: Any = None  # recorded after the H2D, waited for by the compute stream
    compute_done: Any = None  # recorded after the compute, waited for by the D2H stream

    @classmethod
    def one_stream(cls, stream: Any, handle: Any) -> "Route":
        return cls(stream, stream, stream, handle, handle, handle)


class DeferredFree:
    """copy_streams: a batch's buffer is allocated on the H2D stream but last used on
    the D2H stream. Freeing it there would leave the pool nothing to reuse on the H2D
    stream while the host runs ahead (it would grow by a batch per batch). Instead the
    H2D stream frees it itself, ``lag`` batches later, after waiting for an event
    recorded behind its D2H: stream-ordered reuse on one stream, bounded memory.

    ``done`` holds ``lag`` reusable non-timing events; each is only ever recorded on
    the D2H stream, so its records complete in order, and a wait takes the event's
    state when it is enqueued, so the next record may follow at once."""

    def __init__(self, pool: Any, hot: HotPath, done: Sequence[Any], live: list):
        self.pool, self.hot, self.done, self.live = pool, hot, list(done), live
        self.lag = len(self.done)
        self.count = 0

    def before_alloc(self, r: Route) -> None:
        """Free the buffer of the batch ``lag`` batches back, on this batch's H2D stream."""
        live = self.live
        if len(live) >= self.lag:
            old_ptr, _, old_done = live[0]
            self.hot.stream_wait_event(r.h2d, old_done)
            self.pool.free_ptr(old_ptr, r.h2d)
            del live[0]  # only now: if the free raised, the abort path frees it

    def after_d2h(self, ptr: int, r: Route) -> None:
        done = self.done[self.count % self.lag]
        self.count += 1
        self.hot.event_record(done, r.d2h)
        self.live[-1] = (ptr, r.h2d, done)

    def flush(self, stream_h: Any) -> None:
        """End of a run: the buffers still waiting go on the D2H stream, behind every
        D2H (nothing is allocated after them in this run)."""
        live = self.live
        while live:
            self.pool.free_ptr(live[0][0], stream_h)
            del live[0]


class BatchProtocol:
    """Enqueues one batch's sequence (module docstring) onto its lane's Route.

    ``alloc(nbytes, stream_h) -> ptr`` and ``free(ptr, stream_h)``: the device memory.
    ``deferred``: a :class:`DeferredFree` instead of ``free`` (copy_streams).
    ``live``: a list the allocations not yet freed in stream order are kept in, as
    ``(ptr, stream_h, done_event)``, for the failure path (None: do not track).
    ``free_in`` / ``ready_out``: per ring slot, the callable that signals it on a
    stream (None: that side is not staged through the ring).
    ``stage_events(batch_index)``: four timing events ``[(event, handle)] * 4`` for
    this batch, or None (no per-stage timing).
    ``acquire_out(slot)``: the host wait for the output slot, just before the D2H.
    """

    def __init__(self, *, hot: HotPath, routes: Sequence[Route], compute: Any, has_out: bool,
                 in_dtype: Any, out_dtype: Any, alloc: Callable[[int, Any], int], free: Callable[[int, Any], None],
                 deferred: DeferredFree | None = None, live: list | None = None,
                 free_in: Sequence[Callable[[Any], None]] | None = None,
                 ready_out: Sequence[Callable[[Any], None]] | None = None,
                 stage_events: Callable[[int], Any] | None = None,
                 acquire_out: Callable[[int], None] | None = None):
        self.hot, self.routes, self.compute = hot, list(routes), compute
        self.has_out, self.in_dtype, self.out_dtype = has_out, in_dtype, out_dtype
        self.writes_output = has_out and compute is not None
        self.alloc, self.free, self.deferred, self.live = alloc, free, deferred, live
        self.free_in, self.ready_out = free_in, ready_out
        self.stage_events, self.acquire_out = stage_events, acquire_out

    def enqueue(self, b: Any, lane: int, slot: int, src: int, dst: int) -> tuple[int, int]:
        """Enqueue batch ``b`` (a plan.Batch) on lane ``lane``'s Route, reading from host
        address ``src`` and writing to ``dst`` (ring slot ``slot`` where a side is
        staged). Returns (device pointer, device address of the output). No waits
        except ``acquire_out``."""
        r = self.routes[lane]
        hot = self.hot
        in_bytes, out_bytes = b.in_bytes, b.out_bytes
        # input and output views in one allocation, the output 256-byte aligned; just the
        # input when compute writes no separate output (compute=None or output=None)
        out_off = (in_bytes + DEVICE_ALIGN - 1) // DEVICE_ALIGN * DEVICE_ALIGN
        dev_bytes = out_off + out_bytes if self.writes_output else in_bytes
        deferred, live = self.deferred, self.live
        # allocate (stream-ordered)
        if deferred is not None:
            deferred.before_alloc(r)
        ptr = self.alloc(dev_bytes, r.h2d)
        if live is not None:
            live.append((ptr, r.h2d, None))
        ev = self.stage_events(b.index) if self.stage_events is not None else None
        if ev:
            hot.event_record(ev[0][1], r.h2d)
        # H2D, then the input slot may be refilled
        hot.memcpy_htod(ptr, src, in_bytes, r.h2d)
        if self.free_in is not None:
            self.free_in[slot](r.h2d_stream)
        if ev:
            hot.event_record(ev[1][1], r.h2d)
        if r.h2d_done is not None:  # compute waits for this H2D only
            hot.event_record(r.h2d_done, r.h2d)
            hot.stream_wait_event(r.compute, r.h2d_done)
        # compute
        compute = self.compute
        if compute is not None:
            y_ptr = ptr + out_off
            x = DeviceArray(ptr, b.in_shape, self.in_dtype)
            compute(r.stream, x, DeviceArray(y_ptr, b.out_shape, self.out_dtype) if self.has_out else None)
        else:
            y_ptr = ptr  # the input goes back as is
        if ev:
            hot.event_record(ev[2][1], r.compute)
        if r.compute_done is not None:  # the D2H waits for this compute only
            hot.event_record(r.compute_done, r.compute)
            hot.stream_wait_event(r.d2h, r.compute_done)
        # D2H, then the output slot may be drained
        if self.acquire_out is not None:
            self.acquire_out(slot)
        if self.has_out:
            hot.memcpy_dtoh(dst, y_ptr, out_bytes, r.d2h)
        if ev:
            hot.event_record(ev[3][1], r.d2h)
        if self.ready_out is not None:
            self.ready_out[slot](r.d2h_stream)
        # free (stream-ordered)
        if deferred is not None:
            deferred.after_d2h(ptr, r)
        else:
            self.free(ptr, r.d2h)
            if live is not None:
                live.pop()
        return ptr, y_ptr
