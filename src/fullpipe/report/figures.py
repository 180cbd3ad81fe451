"""Figures the report draws from an experiment's own table, for experiments that
made none themselves: one horizontal bar chart per experiment, a bar per row.

Each spec names the columns that label a row, the numeric columns to draw (grouped
bars when several), the axis title and whether the axis is logarithmic (for costs
that differ by orders of magnitude, such as cudaMalloc vs a pool).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any


@dataclasses.dataclass(frozen=True)
class BarSpec:
    labels: tuple[str, ...]
    values: tuple[str, ...]
    title: str
    log: bool = False


SPECS: dict[str, BarSpec] = {
    "pinned": BarSpec(("test", "memory", "what"), ("GB/s",), "GB/s: pinned vs pageable, raw and through the executor"),
    "default-stream": BarSpec(("case",), ("concurrency",), "concurrency (1 = serialized, higher = ran together)"),
    "sync": BarSpec(("kernel_us", "mode"), ("ratio",), "throughput / bound, by kernel length (us) and how streams are joined"),
    "host-ring": BarSpec(("recycle", "slots"), ("GB/s",), "GB/s by recycle mode and pinned slots"),
    "concurrency": BarSpec(("test", "grids"), ("ran_at_once",), "grids resident at once"),
    "copy-engines": BarSpec(("work",), ("ms",), "ms: each alone, and together"),
    "alloc-stall": BarSpec(("allocator",), ("alloc+free host ms",), "host blocked in alloc+free (ms, log)", log=True),
    "alloc-overhead": BarSpec(("allocator",), ("alloc+free us / batch",), "allocation cost per batch (us, log)", log=True),
    "fragmentation": BarSpec(("allocator",), ("peak live MiB", "peak reserved MiB"), "peak live vs reserved (MiB)"),
    "llm-scratch": BarSpec(("scratch",), ("throughput / bound", "memory / bound"), "throughput and memory vs preallocating for the maximum"),
    "cluster": BarSpec(("kernel",), ("TFLOP/s",), "TFLOP/s"),
    "persistent": BarSpec(("shape", "kernel"), ("TFLOP/s",), "TFLOP/s on many small tiles"),
}


def bar_chart(result: dict[str, Any], spec: BarSpec, path: Path) -> Path | None:
    """Draw ``spec`` from ``result['table']`` into ``path``; None when nothing to draw."""
    rows = [r for r in result.get("table") or []
            if any(isinstance(r.get(v), (int, float)) and not isinstance(r.get(v), bool) for v in spec.values)]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [" · ".join(str(r.get(c)) for c in spec.labels if r.get(c) is not None) for r in rows]
    n, k = len(rows), len(spec.values)
    height = 0.8 / k
    fig, ax = plt.subplots(figsize=(8, 0.9 + 0.32 * n * max(1, k * 0.7)))
    for j, col in enumerate(spec.values):
        vals = [float(r[col]) if isinstance(r.get(col), (int, float)) else 0.0 for r in rows]
        ys = [i + (j - (k - 1) / 2) * height for i in range(n)]
        ax.barh(ys, vals, height=height, label=col, color=f"C{j}")
    ax.set_yticks(range(n), labels, fontsize=8)
    ax.invert_yaxis()
    if spec.log:
        ax.set_xscale("log")
    ax.set_xlabel(spec.title)
    if k > 1:
        ax.legend(fontsize=8)
    ax.set_title(result.get("experiment", ""), fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def add_table_figures(results: list[dict[str, Any]], out_dir: Path) -> None:
    """Give every result that has no figure of its own a bar chart of its table
    (written to ``out_dir/figures``, recorded relative to ``out_dir``)."""
    for r in results:
        spec = SPECS.get(r.get("experiment", ""))
        if spec is None or r.get("figures") or r.get("verdict") in ("failed", "skipped"):
            continue
        rel = Path("figures") / f"{r['experiment']}-table.png"
        if bar_chart(r, spec, out_dir / rel) is not None:
            r.setdefault("figures", {})[f"{r['experiment']}: {spec.title}"] = rel.as_posix()
