"""The timeline data model: what the GPU did, one :class:`Record` per operation.

A record is an interval ``[start_ns, end_ns)`` on one stream, of one kind:

=========  ==================================================  ===========
kind       what                                                engine
=========  ==================================================  ===========
kernel     a kernel on the SMs                                 ``compute``
memcpy     a copy; ``direction`` h2d / d2h / d2d / h2h / p2p    the direction
memset     a memset                                            ``memset``
sync       the host waiting (stream/event/context sync)        ``host``
memory     an allocation or free (an instant)                  none
pool       a memory pool created / trimmed / destroyed          none
=========  ==================================================  ===========

The *engine* is the hardware row an operation occupies: the H2D copy engine,
the SMs, the D2H copy engine. The overlap metrics (:mod:`.metrics`) work on the
union of each engine's intervals, whatever stream they came from.

fullpipe's own file format (:meth:`Timeline.dump`, :func:`load`) is a small JSON
object: ``{"format": "fullpipe-timeline", "version": 1, "source", "device",
"notes", "streams", "records": [...]}`` with integer nanoseconds. It is what the
CPU tests read; :meth:`Timeline.save` writes the Chrome/Perfetto trace instead.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Iterable

FORMAT = "fullpipe-timeline"
VERSION = 1

KINDS = ("kernel", "memcpy", "memset", "sync", "memory", "pool")
DIRECTIONS = ("h2d", "d2h", "d2d", "h2h", "p2p", "other")
# The three engines a level-1 pipeline keeps busy, in pipeline order.
ENGINES = ("h2d", "compute", "d2h")
INSTANT_KINDS = ("memory", "pool")


@dataclasses.dataclass
class Record:
    """One operation. Times are integer nanoseconds on one clock (CUPTI's, or the
    event clock of the fallback); only differences between them mean anything."""

    kind: str
    name: str
    start_ns: int
    end_ns: int
    stream: int | None = None
    direction: str | None = None  # memcpy only
    bytes: int | None = None  # memcpy, memset, memory
    pinned: bool | None = None  # memcpy between host and device: is the host side pinned?
    tag: Any = None  # e.g. the batch index, from fullpipe.trace.tag() / stamp()
    info: dict[str, Any] = dataclasses.field(default_factory=dict)  # grid, block, sync type ...

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"record kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind == "memcpy" and self.direction not in DIRECTIONS:
            raise ValueError(f"a memcpy record needs a direction in {DIRECTIONS}, got {self.direction!r}")
        self.start_ns = int(self.start_ns)
        self.end_ns = int(self.end_ns)

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def engine(self) -> str | None:
        """The hardware row: ``h2d``/``d2h``/``d2d``/... for copies, ``compute`` for
        kernels, ``memset``, ``host`` for synchronizations, None for instants."""
        if self.kind == "kernel":
            return "compute"
        if self.kind == "memcpy":
            return self.direction
        if self.kind == "memset":
            return "memset"
        if self.kind == "sync":
            return "host"
        return None

    @property
    def is_instant(self) -> bool:
        return self.kind in INSTANT_KINDS

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "name": self.name, "start_ns": self.start_ns,
                             "end_ns": self.end_ns}
        for key in ("stream", "direction", "bytes", "pinned", "tag"):
            value = getattr(self, key)
            if value is not None:
                d[key] = value
        if self.info:
            d["info"] = self.info
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Record":
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - fields
        if unknown:
            raise ValueError(f"unknown record fields {sorted(unknown)}")
        return cls(**d)


@dataclasses.dataclass
class Timeline:
    """Records of one capture, with where they came from and what to know about them.

    ``source`` is ``"cupti"`` (activity records: every kernel and copy in the
    process, GPU timestamps) or ``"events"`` (the fallback: CUDA events around
    fullpipe's own operations only, coarser). ``notes`` say what is missing or
    approximate. ``streams`` maps stream ids to names given with
    :func:`fullpipe.trace.name_stream`.
    """

    records: list[Record] = dataclasses.field(default_factory=list)
    source: str = "cupti"
    device: str | None = None
    notes: list[str] = dataclasses.field(default_factory=list)
    streams: dict[int, str] = dataclasses.field(default_factory=dict)

    # ------------------------------------------------------------------ selections
    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self):
        return iter(self.records)

    def intervals(self) -> list[Record]:
        """Records with a duration (not instants), sorted by start."""
        return sorted((r for r in self.records if not r.is_instant), key=lambda r: (r.start_ns, r.end_ns))

    def of_engine(self, engine: str) -> list[Record]:
        return [r for r in self.intervals() if r.engine == engine]

    def engine_intervals(self, engine: str) -> list[tuple[int, int]]:
        return [(r.start_ns, r.end_ns) for r in self.of_engine(engine)]

    def device_records(self) -> list[Record]:
        """Intervals that occupy the GPU (everything but host-side synchronization)."""
        return [r for r in self.intervals() if r.engine != "host"]

    def stream_ids(self) -> list[int]:
        return sorted({r.stream for r in self.records if r.stream is not None})

    def stream_label(self, stream: int | None) -> str:
        if stream is None:
            return "stream ?"
        name = self.streams.get(stream)
        return f"stream {stream}" + (f" ({name})" if name else "")

    def span_ns(self) -> tuple[int, int]:
        """(first start, last end) over the device records; (0, 0) when there are none."""
        recs = self.device_records()
        if not recs:
            return (0, 0)
        return (min(r.start_ns for r in recs), max(r.end_ns for r in recs))

    # ------------------------------------------------------------------ checks
    def problems(self) -> list[str]:
        """Impossible timestamps: end before start, and device operations on one stream
        that overlap (a stream runs its work in order, one operation at a time)."""
        out = []
        for r in self.records:
            if r.end_ns < r.start_ns:
                out.append(f"{r.kind} {r.name!r} on {self.stream_label(r.stream)} ends before it starts "
                           f"({r.start_ns} > {r.end_ns})")
        by_stream: dict[int | None, list[Record]] = {}
        for r in self.device_records():
            by_stream.setdefault(r.stream, []).append(r)
        for stream, recs in by_stream.items():
            if stream is None:
                continue
            for a, b in zip(recs, recs[1:]):
                if b.start_ns < a.end_ns:
                    out.append(f"{self.stream_label(stream)}: {b.kind} {b.name!r} starts "
                               f"{a.end_ns - b.start_ns} ns before {a.kind} {a.name!r} ends")
        return out

    # ------------------------------------------------------------------ outputs
    def summary(self):
        """Busy fractions, 2- and 3-engine overlap, SM idle gaps, bandwidth: a
        :class:`fullpipe.trace.metrics.Summary` (``print()`` it, or ``.as_dict()``)."""
        from .metrics import summarize

        return summarize(self)

    def save(self, path: str | Path) -> Path:
        """Write a Chrome/Perfetto trace-event JSON (open it at ui.perfetto.dev)."""
        from .export import write_trace_events

        return write_trace_events(self, path)

    def plot(self, path: str | Path, *, title: str | None = None, color_by: str = "auto") -> Path:
        """Write a PNG Gantt chart: H2D engine, compute per stream, D2H engine."""
        from .plot import gantt

        return gantt(self, path, title=title, color_by=color_by)

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "source": self.source,
            "device": self.device,
            "notes": list(self.notes),
            "streams": {str(k): v for k, v in self.streams.items()},
            "records": [r.as_dict() for r in sorted(self.records, key=lambda r: (r.start_ns, r.end_ns))],
        }

    def dump(self, path: str | Path) -> Path:
        """Write fullpipe's own timeline JSON (what :func:`load` reads)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.as_dict(), indent=1) + "\n")
        return path

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Timeline":
        if d.get("format") != FORMAT:
            raise ValueError(f"not a fullpipe timeline (format {d.get('format')!r}); "
                             "a Perfetto trace from Timeline.save() cannot be loaded back")
        if d.get("version") != VERSION:
            raise ValueError(f"fullpipe timeline version {d.get('version')!r} is not supported (want {VERSION})")
        return cls(
            records=[Record.from_dict(r) for r in d.get("records", [])],
            source=d.get("source", "cupti"),
            device=d.get("device"),
            notes=list(d.get("notes", [])),
            streams={int(k): v for k, v in d.get("streams", {}).items()},
        )

    def shifted(self, origin_ns: int | None = None) -> "Timeline":
        """A copy with times relative to ``origin_ns`` (default: the first record)."""
        if origin_ns is None:
            origin_ns = min((r.start_ns for r in self.records), default=0)
        recs = [dataclasses.replace(r, start_ns=r.start_ns - origin_ns, end_ns=r.end_ns - origin_ns,
                                    info=dict(r.info)) for r in self.records]
        return dataclasses.replace(self, records=recs, notes=list(self.notes), streams=dict(self.streams))


def load(path: str | Path) -> Timeline:
    """Read a timeline written by :meth:`Timeline.dump`."""
    try:
        d = json.loads(Path(path).read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from exc
    return Timeline.from_dict(d)


def timeline_from(records: Iterable[Record], **kwargs: Any) -> Timeline:
    return Timeline(records=list(records), **kwargs)
