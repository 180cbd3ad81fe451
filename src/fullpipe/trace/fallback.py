"""The fallback when CUPTI is missing: CUDA events recorded around fullpipe's own
operations (the ones wrapped in :func:`fullpipe.trace.stamp`).

Coarser than CUPTI, and the timeline says so in its notes:

- only stamped operations appear (not PyTorch's or CuPy's kernels, nor anything
  fullpipe did not wrap);
- an event records when the stream *reaches* it, so a range starts when the
  previous work on its stream finished, not when the copy engine or the SMs
  actually picked the operation up (cross-stream waits enqueued before the
  stamp are accounted for, since the start event sits behind them);
- event times have a resolution of about 0.5 us (cuEventElapsedTime).
"""

from __future__ import annotations

import threading
from typing import Any

from .timeline import Record

NOTE = ("coarse timeline: CUPTI is not available ({reason}), so it was built from CUDA events "
        "recorded around fullpipe's own operations only (other libraries' kernels are missing; "
        "a range starts when its stream reaches it; ~0.5 us resolution)")

STAMP_KINDS = {
    # stamp kind -> (record kind, copy direction)
    "h2d": ("memcpy", "h2d"),
    "d2h": ("memcpy", "d2h"),
    "d2d": ("memcpy", "d2d"),
    "kernel": ("kernel", None),
    "memset": ("memset", None),
}


class _Pending:
    """One stamped operation: its stream, and the events recorded before and after it."""

    __slots__ = ("kind", "stream", "stream_id", "tag", "name", "nbytes", "begin", "end")

    def __init__(self, kind, stream, stream_id, tag, name, nbytes, begin):
        self.kind, self.stream, self.stream_id, self.tag = kind, stream, stream_id, tag
        self.name, self.nbytes, self.begin, self.end = name, nbytes, begin, None


class EventSession:
    """Collects (start event, end event) pairs per stamped operation."""

    def __init__(self, reason: str):
        self.reason = reason
        self.pending: list[_Pending] = []
        self.stream_ids: dict[int, int] = {}  # CUstream handle -> small id, in order of first use
        self.notes = [NOTE.format(reason=reason)]
        self._lock = threading.Lock()

    def start(self) -> None:
        pass

    def stream_id(self, stream: Any) -> int:
        from ..cuda.streams import stream_handle

        handle = int(stream_handle(stream))
        with self._lock:
            return self.stream_ids.setdefault(handle, len(self.stream_ids) + 1)

    def begin(self, kind: str, stream: Any, tag: Any, name: str | None, nbytes: int | None) -> _Pending:
        from ..cuda.events import record
        from ..cuda.streams import as_core_stream

        core = as_core_stream(stream)
        return _Pending(kind, core, self.stream_id(core), tag, name, nbytes, record(core, timing=True))

    def end(self, p: _Pending) -> None:
        from ..cuda.events import record

        p.end = record(p.stream, timing=True)
        p.stream = None  # do not keep the stream alive past its use
        with self._lock:
            self.pending.append(p)

    def stop(self) -> list[Record]:
        """Wait for the events and turn them into records (times relative to the
        earliest start event)."""
        from ..cuda.events import elapsed_ms

        if not self.pending:
            return []
        for p in self.pending:
            p.end.sync()
        ref = self.pending[0].begin
        records = []
        for p in self.pending:
            try:
                t0 = round(elapsed_ms(ref, p.begin) * 1e6)
                t1 = round(elapsed_ms(ref, p.end) * 1e6)
            except Exception as exc:
                self.notes.append(f"dropped a {p.kind} range: {exc}")
                continue
            rkind, direction = STAMP_KINDS[p.kind]
            records.append(Record(kind=rkind, name=p.name or (f"copy {direction.upper()}" if direction else p.kind),
                                  start_ns=t0, end_ns=max(t1, t0), stream=p.stream_id, direction=direction,
                                  bytes=p.nbytes, tag=p.tag))
        origin = min(r.start_ns for r in records) if records else 0
        for r in records:  # the first stamp need not be the first to run: start the clock at the earliest
            r.start_ns -= origin
            r.end_ns -= origin
        self.pending.clear()
        return records
