"""CUPTI activity capture through ``cupti-python`` (installed with fullpipe).

How CUPTI's activity API works, and what this module does at each step:

1. ``activity_register_callbacks(requested, completed)``: CUPTI asks for empty
   buffers (``requested`` returns ``(size, max_records)``) and hands full ones back
   (``completed`` gets a list of activity records). Registered once per process;
   the records go to whichever session is active.
2. ``activity_enable(kind)`` for each kind we want: kernels (CONCURRENT_KERNEL, which
   does not serialize kernels the way KERNEL does), MEMCPY, MEMSET, SYNCHRONIZATION,
   MEMORY2 (allocations, with the pool they came from), MEMORY_POOL (pool created /
   trimmed), MEMCPY2 (copies between GPUs), and DRIVER + EXTERNAL_CORRELATION to carry fullpipe's batch tags over
   to the records (``activity_push_external_correlation_id``).
3. At the end: wait for the GPU, ``activity_flush_all(1)`` (forced: incomplete
   buffers too) so every record has been delivered, then ``activity_disable``.
4. Then ``finalize()`` (cuptiFinalize): CUPTI detaches from the process. Disabling the
   kinds is not enough: on an H100 host a multi-GPU layer stack enqueued 25-42 % slower
   after a capture had ended (issue 19's run), and a report runs every experiment in one
   process after earlier ones traced. The next capture attaches CUPTI again (its
   callbacks are registered anew).

Records are converted to :class:`~fullpipe.trace.timeline.Record` inside the
callback, because CUPTI reuses the buffer once the callback returns. Timestamps
are CUPTI's (GPU times mapped to the CPU clock, in ns).
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

from .timeline import Record

BUFFER_BYTES = 8 << 20

_lock = threading.Lock()
_registered = False
_sink: "CuptiSession | None" = None

_DIRECTIONS = {"HTOD": "h2d", "HTOA": "h2d", "DTOH": "d2h", "ATOH": "d2h", "DTOD": "d2d", "DTOA": "d2d",
               "ATOD": "d2d", "ATOA": "d2d", "HTOH": "h2h", "PTOP": "p2p"}
_SYNC_NAMES = {"EVENT_SYNCHRONIZE": "event synchronize", "STREAM_WAIT_EVENT": "stream wait event",
               "STREAM_SYNCHRONIZE": "stream synchronize", "CONTEXT_SYNCHRONIZE": "context synchronize"}


def load_cupti():
    """The ``cupti.cupti`` module, or raise ImportError saying how to get it."""
    try:
        from cupti import cupti
    except Exception as exc:
        raise ImportError(f"cupti-python is not importable ({type(exc).__name__}: {exc}); "
                          "reinstall fullpipe or pip install 'cupti-python>=13,<14' (its major version must match the driver's CUDA)") from exc
    return cupti


def _enum_name(enum_cls: Any, value: int) -> str:
    try:
        return enum_cls(value).name
    except Exception:
        return str(value)


def _buffer_requested():
    return BUFFER_BYTES, 0  # 0: as many records as fit


def _buffer_completed(activities) -> None:
    sink = _sink
    if sink is not None:
        sink.consume(activities)


class CuptiSession:
    """One capture's worth of CUPTI activity. ``start()``, run work, ``stop()``."""

    def __init__(self, *, tags: bool = True):
        self.cupti = load_cupti()
        self.tags = tags
        self.records: list[Record] = []
        self.notes: list[str] = []
        self.enabled: list[Any] = []
        self.external: dict[int, int] = {}  # CUPTI correlation id -> our external id
        self.tag_of: dict[int, Any] = {}  # our external id -> tag
        self._ids = itertools.count(1)
        self._records_lock = threading.Lock()
        self.dropped_incomplete = 0
        self.stop_ns: int | None = None
        c = self.cupti
        K = c.ActivityKind
        self._handlers = {
            int(K.CONCURRENT_KERNEL): self._kernel,
            int(K.KERNEL): self._kernel,
            int(K.MEMCPY): self._memcpy,
            int(K.MEMSET): self._memset,
            int(K.SYNCHRONIZATION): self._sync,
            int(K.MEMORY2): self._memory,
            int(K.MEMORY_POOL): self._pool,
            int(K.EXTERNAL_CORRELATION): self._external,
        }
        # Copies between two GPUs come as MEMCPY2 (CUpti_ActivityMemcpyPtoP), not MEMCPY:
        # the same fields, plus the source and destination devices.
        self._peer_kind = getattr(K, "MEMCPY2", None)
        if self._peer_kind is not None:
            self._handlers[int(self._peer_kind)] = self._memcpy

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Enable the activity kinds. Raises (and leaves nothing enabled) when CUPTI
        cannot trace kernels and copies here; optional kinds that fail become notes."""
        global _registered, _sink
        c = self.cupti
        K = c.ActivityKind
        required = [K.CONCURRENT_KERNEL, K.MEMCPY]
        optional = [K.MEMSET, K.SYNCHRONIZATION, K.MEMORY2, K.MEMORY_POOL]
        if self._peer_kind is not None:
            optional.append(self._peer_kind)
        if self.tags:
            optional += [K.EXTERNAL_CORRELATION, K.DRIVER]
        with _lock:
            if _sink is not None:
                raise RuntimeError("a CUPTI capture is already running in this process")
            if not _registered:
                c.activity_register_callbacks(_buffer_requested, _buffer_completed)
                _registered = True
            _sink = self
        try:
            for kind in required:
                c.activity_enable(kind)
                self.enabled.append(kind)
        except Exception:
            self._disable_all()
            with _lock:
                _sink = None
                self._detach()
            raise
        for kind in optional:
            try:
                c.activity_enable(kind)
                self.enabled.append(kind)
            except Exception as exc:
                self.notes.append(f"CUPTI activity {kind.name} not available here ({exc}); "
                                  "those records are missing")
        if self.tags and K.EXTERNAL_CORRELATION not in self.enabled:
            self.tags = False

    def stop(self) -> None:
        """Flush every record (the caller has waited for the GPU first), disable, and
        detach CUPTI from the process."""
        global _sink
        c = self.cupti
        try:
            c.activity_flush_all(1)  # 1 = CUPTI_ACTIVITY_FLAG_FLUSH_FORCED: incomplete buffers too
        finally:
            self._disable_all()
            with _lock:
                _sink = None
                self._detach()
        self._apply_tags()
        if self.dropped_incomplete:
            self.notes.append(f"{self.dropped_incomplete} CUPTI records had no timestamps (incomplete) "
                              "and were left out")

    def _detach(self) -> None:
        """cuptiFinalize, with every record flushed and every kind disabled (called with
        ``_lock`` held). A CUPTI that cannot detach stays attached, with a note."""
        global _registered
        finalize = getattr(self.cupti, "finalize", None)
        if finalize is None:
            self.notes.append("this cupti-python has no finalize(): CUPTI stays attached after the capture "
                              "(CUDA calls of this process may stay slower)")
            return
        try:
            finalize()
        except Exception as exc:  # noqa: BLE001 - the records are in; say what is left behind
            self.notes.append(f"CUPTI could not detach after the capture ({exc}): CUDA calls of this process "
                              "may stay slower")
            return
        _registered = False  # detached: the next capture registers its callbacks again

    def _disable_all(self) -> None:
        for kind in reversed(self.enabled):
            try:
                self.cupti.activity_disable(kind)
            except Exception:
                pass
        self.enabled.clear()

    def timestamp(self) -> int:
        return int(self.cupti.get_timestamp())

    # ------------------------------------------------------------------ tags and streams
    def push_tag(self, tag: Any) -> None:
        if not self.tags:
            return
        ext = next(self._ids)
        self.tag_of[ext] = tag
        self.cupti.activity_push_external_correlation_id(self.cupti.ExternalCorrelationKind.CUSTOM0, ext)

    def pop_tag(self) -> None:
        if self.tags:
            self.cupti.activity_pop_external_correlation_id(self.cupti.ExternalCorrelationKind.CUSTOM0)

    def stream_id(self, stream: Any) -> int:
        """CUPTI's id for a stream (what the records' ``stream`` field holds)."""
        from ..cuda.streams import stream_handle

        return int(self.cupti.get_stream_id_ex(0, int(stream_handle(stream)), 0))

    def _apply_tags(self) -> None:
        if not self.external:
            return
        for r in self.records:
            corr = r.info.get("correlation")
            ext = self.external.get(corr) if corr is not None else None
            if ext is not None and ext in self.tag_of:
                r.tag = self.tag_of[ext]

    # ------------------------------------------------------------------ record conversion
    def consume(self, activities) -> None:
        """Called by CUPTI (any thread) with a completed buffer's records."""
        out: list[Record] = []
        for a in activities:
            handler = self._handlers.get(int(a.kind))
            if handler is None:
                continue  # DRIVER records: only needed so that external correlation is recorded
            try:
                rec = handler(a)
            except Exception as exc:  # a field this CUPTI lacks: note it once, keep the rest
                msg = f"could not read a CUPTI {_enum_name(self.cupti.ActivityKind, int(a.kind))} record: {exc}"
                if msg not in self.notes:
                    self.notes.append(msg)
                continue
            if rec is not None:
                out.append(rec)
        with self._records_lock:
            self.records.extend(out)

    def _interval(self, a) -> tuple[int, int] | None:
        start, end = int(a.start), int(a.end)
        if start == 0 or end == 0:
            self.dropped_incomplete += 1
            return None
        return start, end

    def _kernel(self, a) -> Record | None:
        iv = self._interval(a)
        if iv is None:
            return None
        return Record(kind="kernel", name=str(a.name), start_ns=iv[0], end_ns=iv[1], stream=int(a.stream_id),
                      info={"grid": [int(a.grid_x), int(a.grid_y), int(a.grid_z)],
                            "block": [int(a.block_x), int(a.block_y), int(a.block_z)],
                            "registers": int(a.registers_per_thread),
                            "shared_bytes": int(a.static_shared_memory) + int(a.dynamic_shared_memory),
                            "correlation": int(a.correlation_id)})

    def _memcpy(self, a) -> Record | None:
        iv = self._interval(a)
        if iv is None:
            return None
        c = self.cupti
        copy_kind = _enum_name(c.ActivityMemcpyKind, int(a.copy_kind))
        direction = _DIRECTIONS.get(copy_kind, "other")
        src = _enum_name(c.ActivityMemoryKind, int(a.src_kind))
        dst = _enum_name(c.ActivityMemoryKind, int(a.dst_kind))
        host_side = src if direction == "h2d" else dst if direction == "d2h" else None
        pinned = {"PINNED": True, "PAGEABLE": False}.get(host_side) if host_side else None
        info = {"src": src.lower(), "dst": dst.lower(), "correlation": int(a.correlation_id)}
        for key in ("src_device_id", "dst_device_id"):  # peer copies (MEMCPY2) only
            if hasattr(a, key):
                info[key.replace("_id", "")] = int(getattr(a, key))
        return Record(kind="memcpy", name=f"copy {direction.upper()}", start_ns=iv[0], end_ns=iv[1],
                      stream=int(a.stream_id), direction=direction, bytes=int(a.bytes), pinned=pinned, info=info)

    def _memset(self, a) -> Record | None:
        iv = self._interval(a)
        if iv is None:
            return None
        return Record(kind="memset", name="memset", start_ns=iv[0], end_ns=iv[1], stream=int(a.stream_id),
                      bytes=int(a.bytes), info={"value": int(a.value), "correlation": int(a.correlation_id)})

    def _sync(self, a) -> Record | None:
        iv = self._interval(a)
        if iv is None:
            return None
        if self.stop_ns is not None and iv[0] >= self.stop_ns:
            return None  # the capture's own wait for the GPU at its end
        kind = _enum_name(self.cupti.ActivitySynchronizationType, int(a.type))
        stream = int(a.stream_id)
        return Record(kind="sync", name=_SYNC_NAMES.get(kind, kind.lower()), start_ns=iv[0], end_ns=iv[1],
                      stream=None if stream in (0, 0xFFFFFFFF) else stream,
                      info={"correlation": int(a.correlation_id)})

    def _memory(self, a) -> Record | None:
        c = self.cupti
        op = _enum_name(c.ActivityMemoryOperationType, int(a.memory_operation_type))
        mem = _enum_name(c.ActivityMemoryKind, int(a.memory_kind)).lower()
        name = {"ALLOCATION": "alloc", "RELEASE": "free"}.get(op, op.lower()) + f" ({mem})"
        t = int(a.timestamp)
        info: dict[str, Any] = {"address": int(a.address), "async": bool(a.is_async),
                                "correlation": int(a.correlation_id)}
        try:
            pool = _enum_name(c.ActivityMemoryPoolType, int(a.memory_pool_config.memory_pool_type))
            info["pool"] = pool.lower()
        except Exception:
            pass
        stream = int(a.stream_id)
        return Record(kind="memory", name=name, start_ns=t, end_ns=t, bytes=int(a.bytes),
                      stream=None if stream in (0, 0xFFFFFFFF) else stream, info=info)

    def _pool(self, a) -> Record | None:
        c = self.cupti
        op = _enum_name(c.ActivityMemoryPoolOperationType, int(a.memory_pool_operation_type)).lower()
        t = int(a.timestamp)
        return Record(kind="pool", name=f"pool {op}", start_ns=t, end_ns=t, bytes=int(a.size_),
                      info={"address": int(a.address), "utilized_bytes": int(a.utilized_size),
                            "release_threshold": int(a.release_threshold)})

    def _external(self, a) -> None:
        if int(a.external_kind) == int(self.cupti.ExternalCorrelationKind.CUSTOM0):
            self.external[int(a.correlation_id)] = int(a.external_id)
        return None
