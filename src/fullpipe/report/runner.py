"""`fullpipe report`: run every experiment, write results.json and index.html.

Each experiment runs in its own process (see worker.py) with a time limit; a
failure or a missing optional dependency is shown as failed/skipped with its
reason, and the report still completes.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Sequence

from .. import experiments
from ..experiments.result import Result
from .figures import add_table_figures
from .html import render

TIME_LIMIT_S = {"quick": 240, "full": 900}


def software_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in ("fullpipe", "cuda-core", "cuda-bindings", "cuda-pathfinder", "numpy", "torch",
                 "cupy-cuda13x", "cupti-python", "nvidia-cuda-nvrtc", "matplotlib"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def descriptions() -> dict[str, str]:
    """Each experiment module's TITLE and first docstring paragraph, for the page."""
    out = {}
    for name in experiments.names():
        try:
            mod = experiments.load(name)
        except Exception:
            continue
        doc = (mod.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
        title = getattr(mod, "TITLE", "")
        out[name] = f"{title}. {doc}".strip(". ") if title else doc
    return out


def run_one(name: str, out_dir: Path, quick: bool, progress: Callable[[float, str], None],
            device: int = 0) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "fullpipe.report.worker", name, "--out", str(out_dir), "--device", str(device)]
    if quick:
        cmd.append("--quick")
    limit = TIME_LIMIT_S["quick" if quick else "full"]
    log_path = out_dir / "logs" / f"{name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    result_path = out_dir / f"{name}.json"
    result_path.unlink(missing_ok=True)
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=dict(os.environ, PYTHONUNBUFFERED="1", MPLBACKEND="Agg"))
        assert proc.stdout is not None
        timed_out = False
        for line in proc.stdout:
            log.write(line)
            if line.startswith("PROGRESS "):
                _, frac, *msg = line.rstrip("\n").split(" ", 2)
                progress(float(frac), msg[0] if msg else "")
            if time.monotonic() - t0 > limit:
                timed_out = True
                proc.kill()
                break
        proc.wait()
    if result_path.is_file() and not timed_out:
        return json.loads(result_path.read_text())
    reason = (f"timed out after {limit} s" if timed_out else f"worker exited with status {proc.returncode} "
              "without a result (a crash: see the log)")
    tail = log_path.read_text()[-3000:] if log_path.is_file() else ""
    return Result(name, "", "failed", {}, {}, {}, notes=[reason, tail] if tail else [reason]).as_dict()


def run_report(out_dir: Path, *, quick: bool = False, only: Sequence[str] | None = None,
               facts: dict | None = None, device: int = 0) -> Path:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    names = list(only) if only else experiments.names()
    unknown = [n for n in names if n not in experiments.names()]
    if unknown:
        raise ValueError(f"unknown experiment(s) {', '.join(unknown)}; known: {', '.join(experiments.names())}")
    out_dir.mkdir(parents=True, exist_ok=True)
    results: list[dict] = []
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.fields[msg]}"),
                  TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn()) as prog:
        overall = prog.add_task("report", total=len(names), msg="")
        for i, name in enumerate(names):
            prog.update(overall, description=f"[{i + 1}/{len(names)}] {name}", msg="")

            def progress(frac: float, msg: str, i: int = i) -> None:
                prog.update(overall, completed=i + frac, msg=msg[:60])

            res = run_one(name, out_dir, quick, progress, device)
            results.append(res)
            prog.update(overall, completed=i + 1, msg=res.get("verdict", ""))
    add_table_figures(results, out_dir)
    versions = software_versions()
    doc = {"facts": facts, "versions": versions, "quick": quick, "results": results}
    (out_dir / "results.json").write_text(json.dumps(doc, indent=2))
    return write_html(out_dir, doc)


def write_html(out_dir: Path, doc: dict) -> Path:
    page = render(doc["results"], facts=doc.get("facts"), versions=doc.get("versions", {}),
                  base_dir=out_dir, descriptions=descriptions())
    path = out_dir / "index.html"
    path.write_text(page)
    return path
