"""`fullpipe report`: run every experiment, write results.json and index.html.

Each experiment runs in its own process (see worker.py) with a time limit; a
failure or a missing optional dependency is shown as failed/skipped with its
reason, and the report still completes. Every kernel is compiled first, in
parallel on the CPU, so no experiment waits for NVRTC. results.json is rewritten
after every experiment, so an interrupted report keeps what it measured.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import queue
import signal
import subprocess
import sys
import threading
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Sequence

from .. import experiments
from ..experiments.result import Result
from ..experiments.claims import failure_reason
from .figures import add_figures
from .html import render

# Per experiment; a hung experiment is killed and shown as failed.
TIME_LIMIT_S = {"quick": 150, "full": 900}

# Typical seconds per experiment on an H100/H200 (from the worker's go to its exit; it
# imports before that, while the previous experiment runs), used only to weight the
# overall progress bar so that its time-left estimate is sensible before the first
# experiments finish. Measured times replace them in results.json. Quick: an H100,
# 2026-11-26 (168.8 s in all).
EXPECTED_S = {
    "quick": {"overlap": 13, "pinned": 3, "default-stream": 1, "sync": 1, "host-ring": 13, "concurrency": 1,
              "copy-engines": 1, "alloc-stall": 1, "alloc-overhead": 6, "release-threshold": 1,
              "fragmentation": 7, "llm-scratch": 1, "gemm": 9, "cluster": 3, "persistent": 3, "gemm-hopper": 4,
              "attention": 15, "attention-hopper": 2, "workloads": 28, "multi-gpu": 1, "two-level": 17,
              "two-level-decode": 20},
    "full": {"overlap": 60, "pinned": 40, "default-stream": 10, "sync": 10, "host-ring": 45, "concurrency": 10,
             "copy-engines": 8, "alloc-stall": 8, "alloc-overhead": 30, "release-threshold": 12,
             "fragmentation": 60, "llm-scratch": 20, "gemm": 90, "cluster": 15, "persistent": 15},
}

_DISTRIBUTIONS = [
    ("fullpipe", ("fullpipe",)),
    ("cuda-core", ("cuda-core", "cuda_core")),
    ("cuda-bindings", ("cuda-bindings", "cuda_bindings")),
    ("cuda-pathfinder", ("cuda-pathfinder",)),
    ("NVRTC wheel", ("nvidia-cuda-nvrtc", "nvidia-cuda-nvrtc-cu13", "nvidia-cuda-nvrtc-cu12")),
    ("numpy", ("numpy",)),
    ("torch", ("torch",)),
    ("cupy", ("cupy-cuda13x", "cupy-cuda12x", "cupy")),
    ("cupti-python", ("cupti-python",)),
    ("matplotlib", ("matplotlib",)),
    ("rich", ("rich",)),
]


def software_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for label, dists in _DISTRIBUTIONS:
        for dist in dists:
            try:
                out[label] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
        else:
            out[label] = "not installed"
    return out


def descriptions() -> dict[str, dict[str, str]]:
    """Each experiment's TITLE, TECHNIQUE, the question its docstring opens with, and
    the rest of the docstring (how it is measured), for the page."""
    out = {}
    for name in experiments.names():
        try:
            mod = experiments.load(name)
        except Exception:
            continue
        paras = [p.strip() for p in (mod.__doc__ or "").strip().split("\n\n") if p.strip()]
        question = paras[0].replace("\n", " ") if paras else ""
        for prefix in (f"fullpipe bench {name}:", f"{name}:"):
            if question.startswith(prefix):
                question = question[len(prefix):].strip()
        question = question[:1].upper() + question[1:]
        out[name] = {"title": getattr(mod, "TITLE", ""), "technique": getattr(mod, "TECHNIQUE", ""),
                     "question": question, "method": "\n\n".join(paras[1:])}
    return out


# --------------------------------------------------------------------------- kernels
def precompile(arch: str, progress: Callable[[float, str], None] | None = None, workers: int | None = None) -> dict:
    """Compile every kernel the package ships for ``arch`` into the cubin cache, in
    parallel processes (NVRTC is CPU work, and the GPU is idle before the first
    experiment). Returns {"seconds", "compiled", "errors"}; errors do not stop the
    report (the experiment that needs the kernel will report it)."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from ..cuda import compiler

    t0 = time.monotonic()
    sources = [str(p) for p in compiler.package_sources()]
    workers = workers or max(1, min(len(sources), (os.cpu_count() or 2) - 1, 8))
    errors: list[str] = []
    done = 0
    import multiprocessing

    # spawn, not fork: the parent may hold a CUDA context (fork after CUDA init is unsafe)
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futs = {pool.submit(_compile_one, src, arch): src for src in sources}
        for fut in as_completed(futs):
            done += 1
            try:
                fut.result()
            except Exception as exc:  # noqa: BLE001 - reported, not fatal
                errors.append(f"{Path(futs[fut]).name}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            if progress:
                progress(done / len(sources), f"compiled {Path(futs[fut]).name}")
    return {"seconds": time.monotonic() - t0, "compiled": len(sources) - len(errors), "errors": errors}


def _compile_one(path: str, arch: str) -> None:
    from ..cuda import compiler

    compiler.compile_file(path, arch=arch)


def arch_of(facts: dict | None) -> str | None:
    """The arch fullpipe compiles for on this device (what compiler.default_arch gives)."""
    cc = (facts or {}).get("compute_capability")
    if not cc or len(cc) != 2:
        return None
    major, minor = int(cc[0]), int(cc[1])
    return f"sm_{major}{minor}" + ("a" if major >= 9 else "")


# --------------------------------------------------------------------------- one experiment
def worker_env(quick: bool) -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", MPLBACKEND="Agg")
    # The quick report must stay within minutes: no Nsight Compute child runs (gemm and
    # cluster profile with ncu, up to 90 s each). FULLPIPE_NO_NCU=0 keeps them.
    if quick:
        env.setdefault("FULLPIPE_NO_NCU", "1")
    return env


def worker_command(name: str, out_dir: Path, quick: bool, device: int) -> list[str]:
    cmd = [sys.executable, "-m", "fullpipe.report.worker", name, "--out", str(out_dir), "--device", str(device)]
    return cmd + (["--quick"] if quick else [])


class _Worker:
    """One experiment's process, its output read into a queue from the start. Started
    ahead with ``--wait``, it imports while the previous experiment runs (Python, the
    package, torch: one to several seconds, on one CPU: worker.py) and touches the GPU
    only after :meth:`go`."""

    def __init__(self, name: str, out_dir: Path, quick: bool, device: int, *, wait: bool):
        cmd = worker_command(name, out_dir, quick, device) + (["--wait"] if wait else [])
        # Its own session, so a time-out kills the experiment's own children too.
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE if wait else subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True, env=worker_env(quick))
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.reader = threading.Thread(target=self._pump, daemon=True)
        self.reader.start()

    def _pump(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            self.lines.put(line)
        self.lines.put(None)

    def go(self) -> None:
        if self.proc.stdin is None:
            return
        try:
            self.proc.stdin.write("go\n")
            self.proc.stdin.close()
        except OSError:  # it died while importing: its output says why
            pass

    def cancel(self) -> None:
        """Never told to go (the report was interrupted): end of input makes it exit."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            _kill(self.proc)


def run_one(name: str, out_dir: Path, quick: bool, progress: Callable[[float, str], None],
            device: int = 0, limit_s: float | None = None, worker: _Worker | None = None) -> dict[str, Any]:
    """Run one experiment (in ``worker`` if it was started ahead) within its time limit,
    counted from when it is told to go."""
    limit = limit_s if limit_s is not None else TIME_LIMIT_S["quick" if quick else "full"]
    log_path = out_dir / "logs" / f"{name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    result_path = out_dir / f"{name}.json"
    result_path.unlink(missing_ok=True)
    worker = worker or _Worker(name, out_dir, quick, device, wait=False)
    proc = worker.proc
    t0 = time.monotonic()
    worker.go()
    timed_out = False
    with open(log_path, "w") as log:
        try:
            while True:
                left = limit - (time.monotonic() - t0)
                if left <= 0:
                    timed_out = True
                    _kill(proc)
                    break
                try:
                    line = worker.lines.get(timeout=min(1.0, left))
                except queue.Empty:
                    continue
                if line is None:
                    break
                if line == "READY\n":
                    continue
                log.write(line)
                if line.startswith("PROGRESS "):
                    _, frac, *msg = line.rstrip("\n").split(" ", 2)
                    try:
                        progress(float(frac), msg[0] if msg else "")
                    except ValueError:
                        pass
        except BaseException:  # Ctrl-C: do not leave the experiment running on the GPU
            _kill(proc)
            raise
        proc.wait()
        worker.reader.join(timeout=5)
    wall = time.monotonic() - t0
    if result_path.is_file() and not timed_out:
        res = json.loads(result_path.read_text())
    else:
        reason = (f"timed out after {limit:.0f} s (killed)" if timed_out else
                  f"worker exited with status {proc.returncode} without a result (a crash: see logs/{name}.log)")
        tail = log_path.read_text()[-3000:] if log_path.is_file() else ""
        mod_claim = ""
        try:
            mod_claim = getattr(experiments.load(name), "CLAIM", "")
        except Exception:
            pass
        res = Result(name, mod_claim, "failed", {}, {}, {}, notes=[reason, tail] if tail else [reason]).as_dict()
    res["wall_s"] = wall
    return res


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


# --------------------------------------------------------------------------- the report
def run_report(out_dir: Path, *, quick: bool = False, only: Sequence[str] | None = None,
               facts: dict | None = None, device: int = 0) -> Path:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    names = list(only) if only else experiments.names()
    unknown = [n for n in names if n not in experiments.names()]
    if unknown:
        raise ValueError(f"unknown experiment(s) {', '.join(unknown)}; known: {', '.join(experiments.names())}")
    out_dir.mkdir(parents=True, exist_ok=True)
    mode = "quick" if quick else "full"
    expected = {n: float(EXPECTED_S[mode].get(n, 20)) for n in names}
    expected.update(_previous_times(out_dir, quick, names))  # a re-run: what it took last time
    compile_weight = 5.0
    total_weight = sum(expected.values()) + compile_weight
    started = _dt.datetime.now()
    t0 = time.monotonic()
    con = Console(stderr=False, highlight=False)
    doc: dict[str, Any] = {"facts": facts, "versions": software_versions(), "quick": quick,
                           "started": started.strftime("%Y-%m-%d %H:%M:%S"), "wall_s": None,
                           "experiments": names, "results": []}
    results: list[dict] = doc["results"]
    with Progress(TextColumn("[bold]{task.description}", justify="left"), BarColumn(), TaskProgressColumn(),
                  TextColumn("{task.fields[msg]}"), TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(),
                  console=con, transient=False) as prog:
        overall = prog.add_task("report", total=total_weight, msg="")
        current = prog.add_task("", total=1.0, msg="")
        # the first experiment imports while the kernels compile; each next one while the
        # current one runs
        ahead: _Worker | None = _Worker(names[0], out_dir, quick, device, wait=True) if names else None
        arch = arch_of(facts)
        if arch:
            prog.update(overall, description=f"[0/{len(names)}] compiling kernels ({arch})")

            def cprog(frac: float, msg: str) -> None:
                prog.update(overall, completed=compile_weight * frac)
                prog.update(current, completed=frac, description="  nvrtc", msg=msg[:60])

            try:
                doc["compile"] = precompile(arch, cprog)
            except Exception as exc:  # the experiments compile for themselves
                doc["compile"] = {"errors": [f"{type(exc).__name__}: {exc}"]}
        done_weight = compile_weight
        prog.update(overall, completed=done_weight)
        try:
            for i, name in enumerate(names):
                worker, ahead = ahead, None
                if i + 1 < len(names):
                    ahead = _Worker(names[i + 1], out_dir, quick, device, wait=True)
                prog.update(overall, description=f"[{i + 1}/{len(names)}] {name}", msg="")
                prog.reset(current, total=1.0, completed=0.0, description=f"  {name}", msg="starting")

                def progress(frac: float, msg: str, base: float = done_weight, w: float = expected[name]) -> None:
                    frac = max(0.0, min(1.0, frac))
                    prog.update(overall, completed=base + w * frac)
                    prog.update(current, completed=frac, msg=msg[:60])

                res = run_one(name, out_dir, quick, progress, device, worker=worker)
                results.append(res)
                done_weight += expected[name]
                prog.update(overall, completed=done_weight, msg=res.get("verdict", ""))
                prog.update(current, completed=1.0, msg=res.get("verdict", ""))
                why = f": {failure_reason(res)[:100]}" if res.get("verdict") in ("failed", "skipped") else ""
                prog.console.print(f"  {name:<18} {res.get('verdict', '?'):<17} {res['wall_s']:6.1f} s{why}")
                doc["wall_s"] = time.monotonic() - t0
                _write_json(out_dir, doc)
        finally:
            if ahead is not None:
                ahead.cancel()
        prog.update(current, visible=False)
    doc["wall_s"] = time.monotonic() - t0
    add_figures(results, out_dir)
    _write_json(out_dir, doc)
    return write_html(out_dir, doc)


def _previous_times(out_dir: Path, quick: bool, names: Sequence[str]) -> dict[str, float]:
    try:
        prev = json.loads((out_dir / "results.json").read_text())
    except (OSError, ValueError):
        return {}
    if prev.get("quick") != quick:
        return {}
    return {r["experiment"]: float(r["wall_s"]) for r in prev.get("results", [])
            if r.get("experiment") in names and isinstance(r.get("wall_s"), (int, float)) and r["wall_s"] > 0}


def _write_json(out_dir: Path, doc: dict) -> None:
    tmp = out_dir / "results.json.tmp"
    tmp.write_text(json.dumps(doc, indent=2))
    os.replace(tmp, out_dir / "results.json")


def write_html(out_dir: Path, doc: dict) -> Path:
    page = render(doc["results"], facts=doc.get("facts"), versions=doc.get("versions", {}),
                  base_dir=out_dir, descriptions=descriptions(),
                  meta={"quick": doc.get("quick"), "started": doc.get("started"), "wall_s": doc.get("wall_s")})
    path = out_dir / "index.html"
    path.write_text(page)
    return path
