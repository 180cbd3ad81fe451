"""Nsight Compute from the experiments: find ``ncu`` and read its ``--csv`` output.

The gemm, cluster, gemm-hopper and attention-hopper experiments profile a small child
run of their kernels (when ncu is installed and ``FULLPIPE_NO_NCU`` is not ``1``) and
report counters beside the timings: async-load share, tensor-pipe use, global loads saved.
"""

from __future__ import annotations

import csv
import io
import os
import shutil


def ncu_turned_off() -> bool:
    """``FULLPIPE_NO_NCU=1`` (what ``report --quick`` sets; ``=0`` keeps ncu)."""
    return os.environ.get("FULLPIPE_NO_NCU") == "1"


def find_ncu() -> str | None:
    """$NCU, ``ncu`` on PATH, or the CUDA toolkit's, if executable."""
    for cand in (os.environ.get("NCU"), shutil.which("ncu"), "/usr/local/cuda/bin/ncu"):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def parse_ncu_csv(text: str) -> dict[str, dict[str, float]]:
    """{kernel name: {metric: value}} from ``ncu --csv`` output (other lines ignored).
    Kernel names lose their parameter list; with one launch per kernel, the last
    value of a metric wins."""
    rows = [r for r in csv.reader(io.StringIO(text)) if len(r) > 5]
    hdr = next((r for r in rows if "Kernel Name" in r and "Metric Name" in r), None)
    if hdr is None:
        return {}
    k, name, val = hdr.index("Kernel Name"), hdr.index("Metric Name"), hdr.index("Metric Value")
    per: dict[str, dict[str, float]] = {}
    for r in rows:
        if r is hdr or len(r) <= max(k, name, val):
            continue
        try:
            v = float(r[val].replace(",", ""))
        except ValueError:
            continue
        per.setdefault(r[k].split("(")[0].strip(), {})[r[name]] = v
    return per
