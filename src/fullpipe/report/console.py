"""Running an experiment with a progress bar (and drawing its figure), and printing its
Result as a table."""

from __future__ import annotations

import traceback

from ..experiments import Context, Result, load


def run_with_progress(name: str, ctx: Context) -> Result:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    mod = load(name)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.fields[msg]}"),
                  TimeElapsedColumn(), TimeRemainingColumn(), transient=False) as prog:
        task = prog.add_task(name, total=1.0, msg="")

        def progress(fraction: float, message: str = "") -> None:
            prog.update(task, completed=max(0.0, min(1.0, fraction)), msg=message)

        ctx.progress = progress
        try:
            result = mod.run(ctx)
        except Exception as exc:  # reported, not hidden: the verdict says failed
            result = Result(experiment=name, claim=getattr(mod, "CLAIM", ""), verdict="failed",
                            device={}, params={}, metrics={},
                            notes=[f"{type(exc).__name__}: {exc}", traceback.format_exc()])
        progress(1.0, result.verdict)
    if not result.claims:
        from ..experiments.claims import with_claims

        with_claims(result)
    if result.verdict not in ("failed", "skipped"):
        try:  # the figure the report's page shows, beside the JSON
            drawn = mod.figures(result.as_dict(), ctx.out_dir)
            result.figures = {**{caption: str(path) for caption, path in drawn.items()}, **result.figures}
        except Exception as exc:  # the numbers are in the JSON; a figure is a view of them
            result.notes.append(f"figure not drawn: {type(exc).__name__}: {exc}")
    return result


def print_result(result: Result) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(highlight=False)
    if result.table:
        t = Table(title=f"{result.experiment}: {result.claim}")
        cols = list(result.table[0].keys())
        for c in cols:
            t.add_column(str(c))
        for row in result.table:
            t.add_row(*[_fmt(row.get(c)) for c in cols])
        con.print(t)
    if result.bound:
        con.print(f"bound: {result.bound.name} = {result.bound.value:.4g} {result.bound.unit}"
                  + (f"; ratio {result.ratio:.3f}" if result.ratio is not None else ""))
    con.print(f"verdict: [bold]{result.verdict}[/bold] — {result.claim}")
    for n in result.notes:
        con.print(f"  note: {n}")
    if result.claims:
        t = Table(title="claims", show_lines=False)
        for c in ("claim", "measured here", "bound", "ratio", "verdict"):
            t.add_column(c, overflow="fold")
        for c in result.claims:
            t.add_row(str(c.get("claim", "")), str(c.get("measured", "")), str(c.get("bound", "")),
                      _fmt(c.get("ratio")), f"[bold]{c.get('verdict', '')}[/bold]")
        con.print(t)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "" if v is None else str(v)
