"""One batch's enqueue sequence, written once:

    allocate -> H2D -> release the input slot -> compute -> D2H -> signal the output slot -> free

:func:`protocol_halves` makes the two functions that enqueue it for one batch,
without waiting: ``front`` (allocate, H2D, input slot) and ``back`` (compute, D2H,
output slot, free). The executor issues the fronts of the next ``prefetch`` batches
before the back of the current one, so their H2Ds are in flight while the host is
inside the user's compute call; :func:`batch_protocol` is the two back to back (one
batch whole, as graph captures use it). The same code
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

from time import perf_counter
from typing import Any, Callable, NamedTuple, Sequence

from ..cuda.hotpath import HotPath
from ..cuda.memory import DeviceArray

DEVICE_ALIGN = 256  # the output view starts here after the input, in one allocation


class Route(NamedTuple):
    """Where one lane's batches go: the stream of each step (objects for the compute
    callable and the slot signals, driver handles for the hot path) and the events
    that join the steps when they are on different streams (None: one stream).
    A tuple: the protocol unpacks it once per batch."""

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

    def before_alloc(self, h2d: Any) -> None:
        """Free the buffer of the batch ``lag`` batches back, on this batch's H2D stream."""
        live = self.live
        if len(live) >= self.lag:
            old_ptr, _, old_done = live[0]
            if old_done is None:  # pragma: no cover - prefetch is kept below lag by the executor
                raise RuntimeError("copy_streams: the buffer to free has no D2H yet (prefetch >= lag)")
            self.hot.stream_wait_event(h2d, old_done)
            self.pool.free_ptr(old_ptr, h2d)
            del live[0]  # only now: if the free raised, the abort path frees it

    def after_d2h(self, entry: list, d2h: Any) -> None:
        """``entry``: the batch's ``[ptr, h2d stream, None]`` in ``live``; its done event
        is recorded behind its D2H. (Not ``live[-1]``: with prefetch, later batches'
        allocations are already in ``live``.)"""
        done = self.done[self.count % self.lag]
        self.count += 1
        self.hot.event_record(done, d2h)
        entry[2] = done

    def flush(self, stream_h: Any) -> None:
        """End of a run: the buffers still waiting go on the D2H stream, behind every
        D2H (nothing is allocated after them in this run)."""
        live = self.live
        while live:
            self.pool.free_ptr(live[0][0], stream_h)
            del live[0]


class Pending(NamedTuple):
    """A batch whose first half (allocate, H2D, input slot) is enqueued and whose
    second half (compute, D2H, output slot, free) is not yet."""

    b: Any
    lane: int
    slot: int
    ptr: int  # the input's device address
    mem: int  # the allocation back frees (0: none)
    out_off: int
    ev: Any  # its four timing events, or None
    entry: Any  # its record in ``live`` (a list), or None


class Protocol(NamedTuple):
    """One run's protocol: ``front`` and ``back`` (below); ``back`` is ``call`` then
    ``finish``, which the executor may run apart (the call on another host thread:
    compute_threads.py)."""

    front: Callable[..., Pending]
    back: Callable[..., tuple[int, int]]
    call: Callable[[Pending], tuple[int, Any]]
    finish: Callable[..., tuple[int, int]]


def batch_protocol(**kwargs: Any) -> Callable[..., tuple[int, int]]:
    """The protocol for one run as one call per batch: ``enqueue(b, lane, slot, src,
    dst)`` enqueues batch ``b`` whole and returns (device pointer, device address of
    the output). See :func:`protocol_halves` for the arguments. Graph captures use
    this form (one batch per capture)."""
    halves = protocol_halves(**kwargs)
    front, back = halves.front, halves.back

    def enqueue(b: Any, lane: int, slot: int, src: int, dst: int) -> tuple[int, int]:
        return back(front(b, lane, slot, src), dst)

    return enqueue


def protocol_halves(*, hot: HotPath, routes: Sequence[Route], compute: Any, has_out: bool, in_dtype: Any,
                    out_dtype: Any, alloc: Callable[[int, Any], int], free: Callable[[int, Any], None],
                    deferred: DeferredFree | None = None, live: list | None = None,
                    free_in: Sequence[Callable[[Any], None]] | None = None,
                    ready_out: Sequence[Callable[[Any], None]] | None = None,
                    stage_events: Callable[[int], Any] | None = None,
                    in_flight: Callable[[int, Any], None] | None = None,
                    acquire_out: Callable[[int], None] | None = None,
                    compute_out: Callable[[int, Any, int, Any], tuple[int, Any]] | None = None,
                    dst_of: Callable[[Pending, int, Any], int] | None = None,
                    clock: list | None = None,
                    device_index: int = 0,
                    inputs_on_device: bool = False, sources_pinned: bool = False,
                    destinations_pinned: bool = False) -> Protocol:
    """The protocol for one run, in two halves, so that the executor can enqueue the
    H2D of the next batches before it calls the compute of this one (prefetch):

    - ``front(b, lane, slot, src) -> Pending``: allocate, H2D from host address
      ``src``, release the input slot (ring), join H2D -> compute (copy_streams);
    - ``back(pending, dst) -> (ptr, y_ptr)``: compute, join compute -> D2H, wait for
      the output slot, D2H to host address ``dst``, signal the output slot, free.

    Neither waits, except ``acquire_out``. Stream order is what makes them safe in any
    interleaving: every step of a batch is on its lane's streams, after the previous
    step of the same batch.

    ``alloc(nbytes, stream_h) -> ptr`` and ``free(ptr, stream_h)``: the device memory.
    ``deferred``: a :class:`DeferredFree` instead of ``free`` (copy_streams).
    ``live``: a list the allocations not yet freed in stream order are kept in, as
    ``[ptr, stream_h, done_event]``, for the failure path (None: do not track).
    ``free_in`` / ``ready_out``: per ring slot, the callable that signals it on a
    stream (None: that side is not staged through the ring).
    ``stage_events(batch_index)``: four timing events ``[(event, handle)] * 4`` for
    this batch, or None (no per-stage timing); ``in_flight(batch_index, events)`` is
    told once the last one is recorded (in back).
    ``acquire_out(slot)``: the host wait for the output slot, just before the D2H.
    ``compute_out(lane, stream, ptr, b) -> (y_ptr, info)``: a compute that makes its own
    output (a tensor function, pipeline/tensors.py) from the batch's input at device
    address ``ptr`` (shape ``b.in_shape``, dtype ``in_dtype``) and returns the output's
    device address, valid for the D2H enqueued next on the lane's D2H stream, and what
    ``dst_of`` needs to know of the output; no output region is allocated.
    Otherwise ``compute(stream, x, y)`` writes the output region fullpipe allocated.
    ``dst_of(pending, dst, info) -> dst``: the host address of the D2H, decided after the
    compute (a tensor function's output is sized from ``y``: ``info``).
    ``clock``: a list with one number per lane, the seconds spent in that lane's compute
    calls are added to (the per-call breakdown in the stats; per lane, as calls on
    different lanes may run on different threads).
    ``inputs_on_device``: ``src`` is the batch's input already on the device (the run's
    inputs were uploaded in groups: bulk.DeviceInputs); the front allocates only the
    output region, if the compute writes one, and copies nothing.
    ``sources_pinned``: every ``src`` is page-locked (a ring slot, a bulk block, an input
    found pinned); else each H2D asks the driver, as each D2H does of ``dst`` unless
    ``destinations_pinned`` (an output goes straight to a pageable array where the ring's
    slot or the bulk block has no room for it). A copy with page-locked memory only
    enqueues and keeps the GIL; a copy with pageable memory may wait for the device and
    lets it go (hotpath.py says why). (A range the pin cache pinned only in parts passes
    the driver's ends-check here; the executor never hands one over as pinned, and its
    copy fails either way.)

    Closures rather than an object: they run once per batch, and names bound here are
    read faster than attributes (the executor's enqueue time is a target).
    """
    routes = list(routes)
    writes_output = has_out and compute is not None and compute_out is None
    views: list[Any] = [None] * len(routes)  # per lane: the last batch's (key, x, y) device views
    record, wait, htod, dtoh = hot.event_record, hot.stream_wait_event, hot.memcpy_htod, hot.memcpy_dtoh
    range_pinned = hot.range_pinned  # (None without libcuda: the copy lets the GIL go)

    def page_locked(at: int, nbytes: int) -> bool:  # (its first and last byte, as the executor asks)
        return bool(range_pinned(at, nbytes))

    def front(b: Any, lane: int, slot: int, src: int) -> Pending:
        s_in, _, _, h_in, h, _, h2d_done, _ = routes[lane]
        in_bytes = b.in_bytes
        if inputs_on_device:  # an output region of its own, if any
            ptr = src
            mem = alloc(b.out_bytes, h_in) if writes_output else 0
            out_off = mem - ptr if mem else 0
        else:
            # input and output views in one allocation, the output 256-byte aligned; just the
            # input when compute writes no separate output (compute=None, output=None, or a
            # compute that makes its own output)
            out_off = (in_bytes + DEVICE_ALIGN - 1) // DEVICE_ALIGN * DEVICE_ALIGN
            # allocate (stream-ordered)
            if deferred is not None:
                deferred.before_alloc(h_in)
            ptr = mem = alloc(out_off + b.out_bytes if writes_output else in_bytes, h_in)
        entry = None
        if live is not None and mem:
            entry = [mem, h_in, None]
            live.append(entry)
        ev = stage_events(b.index) if stage_events is not None else None
        if ev:
            record(ev[0][1], h_in)
        # H2D, then the input slot may be refilled
        if not inputs_on_device:
            parts = b.h2d_parts
            if parts is None:
                htod(ptr, src, in_bytes, h_in, sources_pinned or page_locked(src, in_bytes))
            else:  # (a batch of several pinned arrays: one H2D per field, records.py)
                for at, field, n in parts:
                    htod(ptr + at, field, n, h_in, True)
        if free_in is not None:
            free_in[slot](s_in)
        if ev:
            record(ev[1][1], h_in)
        if h2d_done is not None:  # compute waits for this H2D only
            record(h2d_done, h_in)
            wait(h, h2d_done)
        return Pending(b, lane, slot, ptr, mem, out_off, ev, entry)

    def call(p: Pending) -> tuple[int, Any]:
        """The compute of batch ``p``: (the output's device address, what a compute that
        makes its own output said of it, or None). Enqueues on the lane's stream only, so
        calls of batches on different lanes may run on different host threads at once."""
        b, lane, _, ptr, _, out_off, _, _ = p
        stream = routes[lane][1]
        if clock is not None:
            t0 = perf_counter()
        info = None
        if compute_out is not None:
            y_ptr, info = compute_out(lane, stream, ptr, b)
        elif compute is not None:
            y_ptr = ptr + out_off
            key = (ptr, b.in_shape, b.out_shape)
            seen = views[lane]
            if seen is None or seen[0] != key:  # (a lane buffer and equal chunks: the same views again)
                seen = views[lane] = (key, DeviceArray(ptr, b.in_shape, in_dtype, device_index=device_index),
                                      DeviceArray(y_ptr, b.out_shape, out_dtype, device_index=device_index)
                                      if has_out else None)
            compute(stream, seen[1], seen[2])
        else:
            y_ptr = ptr  # the input goes back as is
        if clock is not None:
            clock[lane] += perf_counter() - t0
        return y_ptr, info

    def finish(p: Pending, called: tuple[int, Any], dst: int) -> tuple[int, int]:
        """The rest of the back half once ``call(p)`` has returned ``called``."""
        b, lane, slot, ptr, mem, _, ev, entry = p
        _, _, s_out, _, h, h_out, _, compute_done = routes[lane]
        y_ptr, info = called
        if dst_of is not None:
            dst = dst_of(p, dst, info)
        if ev:
            record(ev[2][1], h)
        if compute_done is not None:  # the D2H waits for this compute only
            record(compute_done, h)
            wait(h_out, compute_done)
        # D2H, then the output slot may be drained
        if acquire_out is not None:
            acquire_out(slot)
        if has_out:
            dtoh(dst, y_ptr, b.out_bytes, h_out, destinations_pinned or page_locked(dst, b.out_bytes))
        if ev:
            record(ev[3][1], h_out)
            if in_flight is not None:
                in_flight(b.index, ev)
        if ready_out is not None:
            ready_out[slot](s_out)
        # free (stream-ordered)
        if deferred is not None:
            deferred.after_d2h(entry, h_out)
        elif mem:
            free(mem, h_out)
            if entry is not None:
                live.remove(entry)  # type: ignore[union-attr]
        return ptr, y_ptr

    def back(p: Pending, dst: int) -> tuple[int, int]:
        return finish(p, call(p), dst)

    return Protocol(front, back, call, finish)
