"""Running one experiment without the report (``python -m fullpipe.experiments.NAME``): its
table, its claims and notes on the terminal, its Result as JSON where asked."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable


def main(prog: str, run: Callable[[Any], Any], format_table: Callable[[list], str], quick_help: str,
         argv: list[str] | None = None) -> int:
    from ..cuda.device import Device
    from . import Context

    ap = argparse.ArgumentParser(prog=prog)
    ap.add_argument("--quick", action="store_true", help=quick_help)
    ap.add_argument("--json", default=None, help="write the Result (the report's JSON) here")
    args = ap.parse_args(argv)
    def progress(fraction: float, message: str) -> None:  # long runs say where they are, on stderr
        print(f"[{fraction:4.0%}] {message}", file=sys.stderr, flush=True)

    res = run(Context(device=Device(0), quick=args.quick, progress=progress))
    print(format_table(res.table))
    for c in res.claims:
        print(f"- {c['verdict']}: {c['claim']}\n    {c['measured']}\n    bound: {c['bound']}")
    for n in res.notes:
        print("note:", n)
    if args.json:
        Path(args.json).write_text(json.dumps(res.as_dict(), indent=2))
    return 0 if res.verdict != "failed" else 1
