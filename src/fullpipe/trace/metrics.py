"""Overlap, busy and idle time, and bandwidth, from a timeline: exact interval arithmetic.

Every number is a length of a union of half-open intervals ``[start, end)`` in
integer nanoseconds, so that two kernels running at once on different streams
count once for "SMs busy", and the answers are exact (the CPU tests check them
against sums worked out by hand).

- :func:`merge`: the union of intervals as sorted, disjoint intervals.
- :func:`busy`: the length of that union.
- :func:`at_least`: the time at least ``k`` of several engines were busy at once.
- :func:`gaps`: the idle stretches of one engine inside a window.
- :func:`summarize`: all of it for a :class:`~fullpipe.trace.timeline.Timeline`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Sequence

Interval = tuple[int, int]


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted disjoint union; touching intervals ``[a, b) [b, c)`` become ``[a, c)``.
    Empty intervals (end <= start) add nothing."""
    out: list[list[int]] = []
    for s, e in sorted((int(s), int(e)) for s, e in intervals if e > s):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def busy(intervals: Iterable[Interval]) -> int:
    """Length of the union of ``intervals``."""
    return sum(e - s for s, e in merge(intervals))


def at_least(engines: Sequence[Iterable[Interval]], k: int) -> int:
    """Time during which at least ``k`` of ``engines`` (each a list of intervals) were
    busy at once. Each engine counts once however many of its operations overlap."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    edges: list[tuple[int, int]] = []
    for intervals in engines:
        for s, e in merge(intervals):
            edges.append((s, +1))
            edges.append((e, -1))
    edges.sort()  # at equal times, -1 sorts before +1: half-open intervals
    total, depth, last = 0, 0, None
    for t, step in edges:
        if last is not None and depth >= k:
            total += t - last
        depth += step
        last = t
    return total


def both(a: Iterable[Interval], b: Iterable[Interval]) -> int:
    """Time both ``a`` and ``b`` were busy."""
    return at_least([list(a), list(b)], 2)


def gaps(intervals: Iterable[Interval], start: int, end: int) -> list[Interval]:
    """The idle stretches of ``intervals`` inside the window ``[start, end)``."""
    out, cursor = [], start
    for s, e in merge(intervals):
        s, e = max(s, start), min(e, end)
        if e <= s:
            continue
        if s > cursor:
            out.append((cursor, s))
        cursor = max(cursor, e)
    if cursor < end:
        out.append((cursor, end))
    return out


# --------------------------------------------------------------------------- summary
@dataclasses.dataclass
class EngineStats:
    engine: str
    ops: int
    busy_ns: int
    busy_fraction: float  # of the span
    bytes: int = 0  # copies only
    gb_per_s_busy: float | None = None  # bytes / busy time: what the engine achieved while moving
    gb_per_s_span: float | None = None  # bytes / span: what the whole run achieved
    pinned_bytes: int = 0
    pageable_bytes: int = 0


@dataclasses.dataclass
class Summary:
    """What the engines did during one timeline. Times in ns, fractions of ``span_ns``."""

    source: str
    span_ns: int
    engines: dict[str, EngineStats]
    at_least_1_ns: int  # any of H2D, compute, D2H busy
    at_least_2_ns: int
    all_3_ns: int
    copy_compute_overlap_ns: int  # compute busy while H2D or D2H busy
    sm_idle_ns: int  # span minus SM busy
    sm_gaps: list[Interval]  # idle stretches of the SMs inside the span, relative to its start
    other_engines: dict[str, EngineStats]  # d2d, memset, h2h, p2p ...
    notes: list[str]

    def fraction(self, ns: int) -> float:
        return ns / self.span_ns if self.span_ns else 0.0

    @property
    def at_least_2_fraction(self) -> float:
        return self.fraction(self.at_least_2_ns)

    @property
    def all_3_fraction(self) -> float:
        return self.fraction(self.all_3_ns)

    @property
    def copy_compute_overlap_fraction(self) -> float:
        return self.fraction(self.copy_compute_overlap_ns)

    def largest_sm_gap_ns(self) -> int:
        return max((e - s for s, e in self.sm_gaps), default=0)

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["sm_gaps"] = [list(g) for g in self.sm_gaps]
        d["at_least_2_fraction"] = self.at_least_2_fraction
        d["all_3_fraction"] = self.all_3_fraction
        d["copy_compute_overlap_fraction"] = self.copy_compute_overlap_fraction
        d["largest_sm_gap_ns"] = self.largest_sm_gap_ns()
        return d

    def __str__(self) -> str:
        ms = lambda ns: f"{ns / 1e6:.3f} ms"  # noqa: E731
        pct = lambda ns: f"{100 * self.fraction(ns):5.1f} %"  # noqa: E731
        lines = [f"timeline ({self.source}): span {ms(self.span_ns)}"]
        for st in list(self.engines.values()) + list(self.other_engines.values()):
            line = f"  {st.engine:<8} busy {ms(st.busy_ns):>12} {pct(st.busy_ns)}  {st.ops:4d} ops"
            if st.bytes:
                line += (f"  {st.bytes / 1e6:10.1f} MB  {st.gb_per_s_busy:6.1f} GB/s while busy"
                         f"  {st.gb_per_s_span:6.1f} GB/s over the span")
                if st.pageable_bytes:
                    line += f"  ({st.pageable_bytes / 1e6:.1f} MB pageable)"
            lines.append(line)
        lines += [
            f"  engines busy at once (H2D, compute, D2H): >=1 {pct(self.at_least_1_ns)}, "
            f">=2 {pct(self.at_least_2_ns)}, all 3 {pct(self.all_3_ns)}",
            f"  copy/compute overlap {ms(self.copy_compute_overlap_ns)} ({pct(self.copy_compute_overlap_ns).strip()})",
            f"  SMs idle {ms(self.sm_idle_ns)} ({pct(self.sm_idle_ns).strip()}) in {len(self.sm_gaps)} gaps, "
            f"largest {ms(self.largest_sm_gap_ns())}",
        ]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _engine_stats(engine: str, records: list, span: int) -> EngineStats:
    b = busy((r.start_ns, r.end_ns) for r in records)
    nbytes = sum(r.bytes or 0 for r in records if r.kind == "memcpy")
    st = EngineStats(engine=engine, ops=len(records), busy_ns=b, busy_fraction=b / span if span else 0.0)
    if nbytes:
        st.bytes = nbytes
        st.gb_per_s_busy = nbytes / b if b else None  # bytes per ns == GB/s
        st.gb_per_s_span = nbytes / span if span else None
        st.pinned_bytes = sum(r.bytes or 0 for r in records if r.pinned is True)
        st.pageable_bytes = sum(r.bytes or 0 for r in records if r.pinned is False)
    return st


def summarize(timeline) -> Summary:
    """The :class:`Summary` of a timeline (see the module docstring for the rules)."""
    t0, t1 = timeline.span_ns()
    span = t1 - t0
    by_engine: dict[str, list] = {}
    for r in timeline.device_records():
        by_engine.setdefault(r.engine, []).append(r)
    engines = {e: _engine_stats(e, by_engine.get(e, []), span) for e in ("h2d", "compute", "d2h")}
    others = {e: _engine_stats(e, recs, span) for e, recs in sorted(by_engine.items())
              if e not in engines}
    iv = {e: [(r.start_ns, r.end_ns) for r in by_engine.get(e, [])] for e in ("h2d", "compute", "d2h")}
    three = [iv["h2d"], iv["compute"], iv["d2h"]]
    sm_gaps = gaps(iv["compute"], t0, t1)
    notes = list(timeline.notes)
    return Summary(
        source=timeline.source,
        span_ns=span,
        engines=engines,
        at_least_1_ns=at_least(three, 1),
        at_least_2_ns=at_least(three, 2),
        all_3_ns=at_least(three, 3),
        copy_compute_overlap_ns=both(iv["compute"], iv["h2d"] + iv["d2h"]),
        sm_idle_ns=span - engines["compute"].busy_ns,
        sm_gaps=[(s - t0, e - t0) for s, e in sm_gaps],
        other_engines=others,
        notes=notes,
    )
