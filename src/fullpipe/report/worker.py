"""Run one experiment in its own process for `fullpipe report`.

Why a process per experiment: a kernel fault leaves the CUDA context unusable
for everything after it, and allocator settings are process-wide. The parent
reads ``PROGRESS <fraction> <message>`` lines from stdout and the Result JSON
from ``<out>/<name>.json``.

    python -m fullpipe.report.worker NAME --out DIR [--quick] [--wait]

With ``--wait`` (how the report starts the next experiment while the current one
runs) the worker imports its experiment and the libraries the experiment names in
``PRELOAD``, prints ``READY`` and waits for a ``go`` line on stdin before it touches
the GPU; end of input instead of ``go`` makes it exit without running anything.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
import traceback
from pathlib import Path

from ..experiments import Context, Result, load


def _progress(fraction: float, message: str = "") -> None:
    print(f"PROGRESS {max(0.0, min(1.0, float(fraction))):.4f} {message}".rstrip(), flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("name")
    p.add_argument("--out", required=True)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--wait", action="store_true", help="import, print READY, run after a 'go' line on stdin")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        mod = load(args.name)
    except Exception as exc:
        if args.wait and not _go():
            return 0
        Result(args.name, "", "failed", {}, {}, {}, notes=[f"cannot load experiment: {exc}"]).to_json(out / f"{args.name}.json")
        return 1
    if args.wait:
        with _one_cpu():  # beside the experiment that runs now: keep off all but one CPU
            for lib in getattr(mod, "PRELOAD", ()):
                try:  # CPU work only: importing torch does not create a CUDA context
                    importlib.import_module(lib)
                except Exception:  # noqa: BLE001 - the experiment says what is missing when it runs
                    pass
        if not _go():
            return 0
    try:
        from ..cuda.device import Device

        device = Device(args.device)
        result = mod.run(Context(device=device, quick=args.quick, out_dir=out, progress=_progress))
    except ImportError as exc:  # an optional dependency (torch, cupy, cupti) is missing
        result = Result(args.name, getattr(mod, "CLAIM", ""), "skipped", {}, {}, {},
                        notes=[f"skipped: missing optional dependency: {exc}"])
    except Exception as exc:
        result = Result(args.name, getattr(mod, "CLAIM", ""), "failed", {}, {}, {},
                        notes=[f"{type(exc).__name__}: {exc}", traceback.format_exc()])
    if not result.claims:  # an experiment that does not fill its claims itself
        from ..experiments.claims import with_claims

        with_claims(result)
    _relative_paths(result, out)
    result.to_json(out / f"{args.name}.json")
    return 0 if result.verdict != "failed" else 1


@contextlib.contextmanager
def _one_cpu():
    """Run the block on this process's last allowed CPU, then give it every CPU back."""
    if not hasattr(os, "sched_setaffinity"):
        yield
        return
    cpus = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {max(cpus)})
    except OSError:
        yield
        return
    try:
        yield
    finally:
        os.sched_setaffinity(0, cpus)


def _go() -> bool:
    """--wait: say READY, then wait for the runner's 'go' (False at end of input: cancelled)."""
    print("READY", flush=True)
    return sys.stdin.readline().strip() == "go"


def _relative_paths(result: Result, out: Path) -> None:
    """Figures and traces relative to the report folder, so the folder can move."""
    root = out.resolve()
    for mapping in (result.figures, result.traces):
        for key, value in list(mapping.items()):
            p = Path(value)
            if p.is_absolute():
                try:
                    mapping[key] = p.resolve().relative_to(root).as_posix()
                except ValueError:
                    pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
