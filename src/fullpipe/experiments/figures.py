"""The house style of fullpipe's figures, and a generic bar chart of a result's table.

Every experiment draws its figure from its result's JSON (``table``, ``metrics``,
``params``) with these helpers, in a function ``figures(r, out)`` beside its
``run()``, so a figure can be redrawn from a results.json on a machine without a
GPU. Sizes are for the report's page: 1100 px wide.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from .claims import is_num

DPI = 100
WIDE = (11.0, 4.3)  # inches: 1100 px at DPI, the page's content width

# one colour per idea, used the same way in every figure
PINNED, PAGEABLE, RING, PLAIN = "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e"
BOUND, GREY = "#333333", "#9aa0ad"
_ALLOCATOR_COLORS = {"preallocated": GREY, "cuMemAlloc": PAGEABLE, "fullpipe": RING, "pool": RING}


def pyplot():
    """matplotlib.pyplot on the Agg backend, in the house style."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 10, "axes.titlesize": 11, "axes.spines.top": False,
                         "axes.spines.right": False, "legend.fontsize": 9, "legend.frameon": False})
    return plt


def save(fig: Any, path: Path, *, tight: bool = True) -> Path:
    """Write ``fig`` as a PNG at the page's DPI and close it. ``tight=False`` for a
    figure that placed its legend itself."""
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if tight:
        fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def allocator_color(name: str) -> str:
    """The colour of an allocator (preallocated, cuMemAlloc, the pool) by its label."""
    for k, c in _ALLOCATOR_COLORS.items():
        if k in name:
            return c
    return PINNED


def rows_of(r: dict, **match: Any) -> list[dict]:
    """The table rows of result ``r`` whose columns equal ``match``."""
    return [x for x in r.get("table") or [] if all(x.get(k) == v for k, v in match.items())]


def need(cond: Any, what: str) -> None:
    """Raise KeyError(what) unless ``cond``: the numbers do not fit this figure."""
    if not cond:
        raise KeyError(what)


def plain_log(ax, axis: str = "x") -> None:
    """A log axis labelled 0.1, 1, 10 rather than 10^-1, 10^0, 10^1."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    a = ax.xaxis if axis == "x" else ax.yaxis
    a.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    a.set_minor_formatter(NullFormatter())


def label_bars(ax, bars, fmt: str = "{:.3g}", horizontal: bool = True) -> None:
    """Write each bar's value at its end."""
    for b in bars:
        v = b.get_width() if horizontal else b.get_height()
        if not is_num(v) or v == 0:
            continue
        if horizontal:
            ax.annotate(fmt.format(v), (v, b.get_y() + b.get_height() / 2), xytext=(3, 0),
                        textcoords="offset points", va="center", fontsize=8)
        else:
            ax.annotate(fmt.format(v), (b.get_x() + b.get_width() / 2, v), xytext=(0, 2),
                        textcoords="offset points", ha="center", va="bottom", fontsize=8)


def ratio_bars(ax, names: list[str], values: list[float], colors: list[str], reference: float, *,
               ratio_label: str, lines: list[tuple[float, str, str]] = (), scale: float = 1.0,
               margin: float = 1.3) -> None:
    """Horizontal bars of ``values`` (drawn divided by ``scale``), each labelled with its
    ratio to ``reference`` ("1.50× eager" for ``ratio_label="eager"``), and vertical
    ``lines`` (value, line style, legend label) such as a target or a bound."""
    ys = np.arange(len(names))
    bars = ax.barh(ys, [v / scale for v in values], color=colors)
    for bar, v in zip(bars, values):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {v / reference:.2f}× {ratio_label}",
                va="center", fontsize=8)
    for x, style, label in lines:
        ax.axvline(x / scale, color=BOUND, ls=style, lw=1.2, label=label)
    ax.set_yticks(ys, names)
    ax.invert_yaxis()
    ax.set_xlim(0, margin * max(list(values) + [x for x, _, _ in lines]) / scale)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3, axis="x")


# --------------------------------------------------------------------------- generic chart
@dataclasses.dataclass(frozen=True)
class BarSpec:
    labels: tuple[str, ...]  # table columns that name a bar
    values: tuple[str, ...]  # numeric columns, one bar each
    title: str
    log: bool = False


def table_spec(result: dict[str, Any]) -> BarSpec | None:
    """A bar chart for any table: its first numeric column, labelled by up to three others."""
    rows = result.get("table") or []
    if not rows:
        return None
    cols = list(rows[0].keys())
    nums = [c for c in cols if any(is_num(r.get(c)) for r in rows)]
    labels = [c for c in cols if c not in nums][:3]
    if not nums:
        return None
    return BarSpec(tuple(labels) or (cols[0],), (nums[0],), nums[0])


def bar_chart(result: dict[str, Any], spec: BarSpec, path: Path) -> Path | None:
    """Draw ``spec`` from ``result['table']`` into ``path``; None when nothing to draw."""
    rows = [r for r in result.get("table") or [] if any(is_num(r.get(v)) for v in spec.values)]
    if not rows:
        return None
    plt = pyplot()
    labels = [" · ".join(str(r.get(c)) for c in spec.labels if r.get(c) is not None) for r in rows]
    n, k = len(rows), len(spec.values)
    height = 0.8 / k
    fig, ax = plt.subplots(figsize=(10, 0.9 + 0.32 * n * max(1, k * 0.7)))
    for j, col in enumerate(spec.values):
        vals = [float(r[col]) if is_num(r.get(col)) else 0.0 for r in rows]
        ys = [i + (j - (k - 1) / 2) * height for i in range(n)]
        ax.barh(ys, vals, height=height, label=col, color=f"C{j}")
    ax.set_yticks(range(n), labels, fontsize=8)
    ax.invert_yaxis()
    if spec.log:
        ax.set_xscale("log")
        plain_log(ax)
    ax.set_xlabel(spec.title)
    if k > 1:
        ax.legend(fontsize=8)
    ax.set_title(result.get("experiment", ""), fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    return save(fig, path)
