"""A PNG Gantt chart of a timeline: the H2D copy engine on top, the SMs one row per
stream, the D2H copy engine below, then any other copies and memsets.

Bars are coloured per batch (the record's ``tag``) when the operations carry tags,
else per kind; the caption gives the overlap numbers from :mod:`.metrics`, so the
figure and the summary always agree.
"""

from __future__ import annotations

from pathlib import Path

KIND_COLORS = {"h2d": "#1f77b4", "compute": "#2ca02c", "d2h": "#d62728", "d2d": "#9467bd",
               "p2p": "#9467bd", "h2h": "#8c564b", "memset": "#7f7f7f", "other": "#8c564b"}
ENGINE_LABELS = {"h2d": "H2D engine", "d2h": "D2H engine", "d2d": "D2D copies", "p2p": "P2P copies",
                 "h2h": "host copies", "memset": "memsets", "other": "other copies"}
MAX_LEGEND_TAGS = 12


def _rows(timeline) -> list[tuple[str, list]]:
    """(label, records) per row, in pipeline order."""
    recs = timeline.device_records()
    rows: list[tuple[str, list]] = []
    h2d = [r for r in recs if r.engine == "h2d"]
    rows.append((ENGINE_LABELS["h2d"], h2d))
    kernels = [r for r in recs if r.engine == "compute"]
    streams = sorted({r.stream for r in kernels}, key=lambda s: (s is None, s))
    for s in streams:
        rows.append((f"SMs: {timeline.stream_label(s)}", [r for r in kernels if r.stream == s]))
    if not streams:
        rows.append(("SMs", []))
    rows.append((ENGINE_LABELS["d2h"], [r for r in recs if r.engine == "d2h"]))
    for engine in ("d2d", "p2p", "h2h", "other", "memset"):
        rs = [r for r in recs if r.engine == engine]
        if rs:
            rows.append((ENGINE_LABELS[engine], rs))
    return rows


def gantt(timeline, path: str | Path, *, title: str | None = None, color_by: str = "auto") -> Path:
    """Draw ``timeline`` to ``path`` (PNG). ``color_by``: "auto" (batch when tagged),
    "tag" or "kind"."""
    if color_by not in ("auto", "tag", "kind"):
        raise ValueError(f"color_by must be 'auto', 'tag' or 'kind', got {color_by!r}")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError as exc:  # pragma: no cover - matplotlib is a dependency
        raise ImportError("tl.plot() needs matplotlib: pip install matplotlib") from exc

    rows = _rows(timeline)
    t0, t1 = timeline.span_ns()
    tags = sorted({r.tag for _, rs in rows for r in rs if r.tag is not None}, key=lambda t: (str(type(t)), t))
    by_tag = color_by == "tag" or (color_by == "auto" and len(tags) > 0)
    cmap = plt.get_cmap("tab20")
    palette = [cmap(i) for i in range(0, 20, 2)] + [cmap(i) for i in range(1, 20, 2)]  # neighbours differ
    tag_color = {t: palette[i % 20] for i, t in enumerate(tags)}

    fig_h = 1.6 + 0.45 * len(rows)
    fig, ax = plt.subplots(figsize=(12, fig_h), dpi=120)
    for y, (label, recs) in enumerate(rows):
        for r in recs:
            color = tag_color.get(r.tag, "#bbbbbb") if by_tag else KIND_COLORS.get(r.engine, "#888888")
            hatch = "//" if (r.kind == "memcpy" and r.pinned is False) else None
            ax.broken_barh([((r.start_ns - t0) / 1e6, max(r.duration_ns, 1) / 1e6)], (y - 0.38, 0.76),
                           facecolors=color, edgecolor="black", linewidth=0.3, hatch=hatch, alpha=0.9)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([label for label, _ in rows])
    ax.invert_yaxis()
    ax.set_xlim(0, max((t1 - t0) / 1e6, 1e-6))
    ax.set_xlabel("time since the first operation (ms)")
    ax.grid(axis="x", linestyle=":", linewidth=0.6)

    s = timeline.summary()
    caption = (f"span {s.span_ns / 1e6:.3f} ms · >=2 engines busy {100 * s.at_least_2_fraction:.0f} % · "
               f"all 3 {100 * s.all_3_fraction:.0f} % · SMs busy {100 * s.engines['compute'].busy_fraction:.0f} %")
    if timeline.source != "cupti":
        caption += " · coarse (event-stamped) timeline"
    ax.set_title((title + "\n" if title else "") + caption, fontsize=10)

    if by_tag:
        shown = tags[:MAX_LEGEND_TAGS]
        handles = [Patch(facecolor=tag_color[t], edgecolor="black", label=f"batch {t}") for t in shown]
        if len(tags) > len(shown):
            handles.append(Patch(facecolor="white", edgecolor="white", label=f"... {len(tags) - len(shown)} more"))
    else:
        used = {r.engine for _, rs in rows for r in rs}
        handles = [Patch(facecolor=KIND_COLORS[e], edgecolor="black",
                         label={"compute": "kernel"}.get(e, ENGINE_LABELS.get(e, e)))
                   for e in KIND_COLORS if e in used]
    if any(r.kind == "memcpy" and r.pinned is False for _, rs in rows for r in rs):
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="//", label="pageable host memory"))
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
