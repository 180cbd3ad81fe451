"""The page's figures: each experiment's own ``figures(r, out)``, drawn from its JSON.

An experiment module draws its figure from its result's ``table``, ``metrics`` and
``params`` (see fullpipe.experiments.figures for the house style), so the page can be
rebuilt from a results.json on a machine without a GPU. A result whose numbers do
not fit its experiment's figure (an older results.json) gets a bar chart of its
table instead, with a note saying why. Figures the experiment recorded itself
(CUPTI timelines) are kept beside them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .. import experiments
from ..experiments.figures import bar_chart, table_spec


def draw_figures(result: dict[str, Any], out_dir: Path) -> tuple[dict[str, str], list[str]]:
    """The figures of one result, written under ``out_dir/figures``: ({caption: path
    relative to out_dir}, problems)."""
    name = result.get("experiment", "")
    problems: list[str] = []
    try:
        draw = experiments.load(name).figures
    except (ValueError, AttributeError):  # not an experiment of this fullpipe, or one without a figure
        draw = None
    if draw is not None:
        try:
            drawn = draw(result, out_dir / "figures")
            return {caption: Path(path).relative_to(out_dir).as_posix() for caption, path in drawn.items()}, problems
        except Exception as exc:  # old or partial numbers: say so, draw the table instead
            problems.append(f"purpose-made figure not drawn ({type(exc).__name__}: {exc}); generic chart instead")
            _close_all()
    figs: dict[str, str] = {}
    spec = table_spec(result)
    if spec is not None:
        rel = Path("figures") / f"{name}-table.png"
        try:
            if bar_chart(result, spec, out_dir / rel) is not None:
                figs[spec.title] = rel.as_posix()
        except Exception as exc:
            problems.append(f"no figure: {type(exc).__name__}: {exc}")
    return figs, problems


def add_figures(results: list[dict[str, Any]], out_dir: Path, workers: int | None = None) -> None:
    """Draw every result's figures for the page (into ``out_dir/figures``, recorded
    relative to ``out_dir``), first among the figures the experiment recorded itself.
    Failed and skipped results without a table get none.

    In ``workers`` processes (default: one per core, at most 8): drawn one after the
    other, a quick report's figures took 7.2 s, after every experiment had run. Spawned,
    not forked (the parent holds a CUDA context); one process, or none where processes
    cannot be started, draws them here."""
    todo = [r for r in results if not (r.get("verdict") in ("failed", "skipped") and not r.get("table"))]
    workers = workers or max(1, min(len(todo), os.cpu_count() or 1, 8))
    drawn = None
    if workers > 1:
        try:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
                drawn = list(pool.map(draw_figures, todo, [out_dir] * len(todo)))
        except (OSError, RuntimeError, ImportError):  # no processes here (a sandbox): draw them in this one
            drawn = None
    if drawn is None:
        drawn = [draw_figures(r, out_dir) for r in todo]
    for r, (figs, problems) in zip(todo, drawn):
        own = dict(r.get("figures") or {})
        r["figures"] = {**figs, **{k: v for k, v in own.items() if k not in figs}}
        if problems:
            r["figure_notes"] = problems


def _close_all() -> None:
    try:
        import matplotlib.pyplot as plt

        plt.close("all")
    except Exception:
        pass
