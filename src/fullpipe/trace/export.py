"""Chrome / Perfetto trace-event JSON: open the file at https://ui.perfetto.dev
(or chrome://tracing) without Nsight Systems.

Layout: one *process* per engine (H2D copies, SMs, D2H copies, other copies,
memsets, host waits, memory), one *thread* per stream inside it, so the rows
read top to bottom in pipeline order and a stream's work lines up across them.
Operations are complete events (``"ph": "X"``, ``ts``/``dur`` in microseconds,
relative to the first record); allocations are instants (``"ph": "i"``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# engine -> (pid, process name); pids order the rows in the UI.
ENGINE_ROWS = {
    "h2d": (1, "H2D copy engine"),
    "compute": (2, "SMs (kernels)"),
    "d2h": (3, "D2H copy engine"),
    "d2d": (4, "D2D copies"),
    "p2p": (4, "D2D copies"),
    "h2h": (5, "Host copies"),
    "other": (5, "Host copies"),
    "memset": (6, "Memsets"),
    "host": (7, "Host waits (synchronize)"),
    None: (8, "Memory (allocations, pools)"),
}


def _args(r) -> dict[str, Any]:
    a: dict[str, Any] = {"stream": r.stream}
    if r.tag is not None:
        a["tag"] = r.tag
    if r.bytes is not None:
        a["bytes"] = r.bytes
        if r.kind == "memcpy" and r.duration_ns > 0:
            a["GB/s"] = round(r.bytes / r.duration_ns, 2)
    if r.pinned is not None:
        a["host memory"] = "pinned" if r.pinned else "pageable"
    a.update(r.info)
    return a


def trace_events(timeline) -> dict[str, Any]:
    """The trace as a dict (``{"traceEvents": [...], ...}``)."""
    origin = min((r.start_ns for r in timeline.records), default=0)
    us = lambda ns: (ns - origin) / 1000.0  # noqa: E731
    events: list[dict[str, Any]] = []
    rows: dict[tuple[int, int], str] = {}
    for r in sorted(timeline.records, key=lambda r: (r.start_ns, r.end_ns)):
        pid, _ = ENGINE_ROWS.get(r.engine, ENGINE_ROWS["other"])
        tid = r.stream if r.stream is not None else 0
        rows[(pid, tid)] = timeline.stream_label(r.stream)
        ev: dict[str, Any] = {"name": r.name, "cat": r.kind, "pid": pid, "tid": tid, "ts": us(r.start_ns),
                              "args": _args(r)}
        if r.is_instant:
            ev.update(ph="i", s="t")
        else:
            ev.update(ph="X", dur=max(r.end_ns - r.start_ns, 0) / 1000.0)
        events.append(ev)
    meta: list[dict[str, Any]] = []
    names = {pid: name for pid, name in ENGINE_ROWS.values()}
    for pid in sorted({p for p, _ in rows}):
        meta.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": names[pid]}})
        meta.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
    for pid, tid in sorted(rows):
        meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                     "args": {"name": rows[(pid, tid)]}})
        meta.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
    return {
        "traceEvents": meta + events,
        "displayTimeUnit": "ms",
        "otherData": {"generator": "fullpipe.trace", "source": timeline.source,
                      "device": timeline.device or "", "notes": list(timeline.notes)},
    }


def write_trace_events(timeline, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(trace_events(timeline)))
    return path
