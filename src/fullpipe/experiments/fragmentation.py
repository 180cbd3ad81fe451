"""fragmentation: can a caching allocator run out of memory with enough total free memory?

The same LLM-serving-like workload (variable-size KV-cache buffers with interleaved
lifetimes, some growing) under five allocators, each in its own process because
allocator settings are process-wide: PyTorch native, PyTorch with
expandable_segments, PyTorch with backend:cudaMallocAsync, CuPy's default pool and
the fullpipe pool. Each runs under a capped budget (a few GB). At the end one large
allocation is asked for: 90 % of what the budget leaves beside the live data, so it
always fits in the total free memory. Reported: peak reserved vs peak live, and
whether the large allocation (and the workload itself) succeeded.

The worker is :mod:`fullpipe.experiments._alloc_worker`; see it for how each
library is capped (PyTorch's cudaMallocAsync backend caps live bytes, not reserved).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from . import _alloc_common as common
from ._alloc_worker import ALLOCATORS
from .result import Bound, Result
from ..report.claims import with_claims

NAME = "fragmentation"
TITLE = "Fragmentation under a capped budget: caching allocators vs the stream-ordered pool"
CLAIM = ("a caching allocator can run out of memory with enough total free memory; "
         "the stream-ordered allocator has no fragmentation problem")

WORKER_TIMEOUT_S = 150
COLUMNS = ("allocator", "backend", "peak live MiB", "peak reserved MiB", "reserved / live", "workload",
           "large request MiB", "live at end MiB", "large request")


def run_worker(kind: str, budget: int, steps: int, seed: int = 1, timeout: float = WORKER_TIMEOUT_S) -> dict[str, Any]:
    """Run one allocator in a fresh process; its last stdout line is JSON."""
    cmd = [sys.executable, "-m", "fullpipe.experiments._alloc_worker", "--allocator", kind,
           "--budget", str(budget), "--steps", str(steps), "--seed", str(seed)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"allocator": kind, "error": f"timed out after {timeout:.0f} s"}
    return parse_worker_output(kind, proc.returncode, proc.stdout, proc.stderr)


def parse_worker_output(kind: str, returncode: int, stdout: str, stderr: str) -> dict[str, Any]:
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                break
    tail = (stderr or stdout).strip().splitlines()[-3:]
    return {"allocator": kind, "error": f"worker exited {returncode} without JSON: {' | '.join(tail)[:400]}"}


def judge(results: dict[str, dict[str, Any]]) -> tuple[str, list[str]]:
    """Verdict from the native PyTorch allocator (the caching allocator) and the
    fullpipe pool (the stream-ordered one)."""
    def ok(r):
        return bool(r.get("big_ok")) and not r.get("workload_failed")

    native, pool = results.get("torch-native", {}), results.get("fullpipe", {})
    notes = []
    if "big_ok" not in pool:
        return "failed", [f"fullpipe worker: {pool.get('error') or pool.get('skipped')}"]
    caching = native if "big_ok" in native else results.get("cupy", {})
    if "big_ok" not in caching:
        notes.append("no caching allocator ran (PyTorch and CuPy both missing): only half the claim is tested")
        return ("partly supported" if ok(pool) else "not supported"), notes
    caching_ooms = not ok(caching)
    if caching_ooms and ok(pool):
        return "supported", notes
    if not caching_ooms and ok(pool):
        notes.append("the caching allocator did not run out of memory on this workload")
        return "not supported", notes
    if caching_ooms and not ok(pool):
        notes.append("both ran out of memory: the stream-ordered pool fragments too under this cap")
        return "partly supported", notes
    notes.append("the caching allocator coped and the pool did not")
    return "not supported", notes


def run(ctx) -> Result:
    dev = ctx.device
    budget = (1 if ctx.quick else 2) * common.GiB
    steps = 300 if ctx.quick else 1200
    results, rows = {}, []
    for i, kind in enumerate(ALLOCATORS):
        ctx.progress(i / len(ALLOCATORS), kind)
        r = run_worker(kind, budget, steps)
        results[kind] = r
        if "skipped" in r or "error" in r:
            rows.append(dict.fromkeys(COLUMNS) | {"allocator": kind, "backend": r.get("skipped") or r.get("error")})
            continue
        wf = r.get("workload_failed")
        rows.append({
            "allocator": kind,
            "backend": r["backend"],
            "peak live MiB": r["peak_live"] / common.MiB,
            "peak reserved MiB": r["peak_reserved"] / common.MiB,
            "reserved / live": r["peak_reserved"] / r["peak_live"] if r["peak_live"] else None,
            "workload": "ok" if not wf else f"OOM at op {wf['index']} ({wf['bytes'] / common.MiB:.0f} MiB)",
            "large request MiB": r["big_request"] / common.MiB,
            "live at end MiB": r["live_at_end"] / common.MiB,
            "large request": "ok" if r["big_ok"] else ("not tried" if wf else "OOM"),
        })
    verdict, notes = judge(results)
    notes = [f"budget {budget / common.GiB:.0f} GiB per allocator; the large request is 90 % of "
             "(budget - live bytes), so it always fits in the total free memory."] + notes
    if "error" not in results.get("torch-async", {}) and "skipped" not in results.get("torch-async", {}):
        notes.append("PyTorch's cudaMallocAsync backend caps the bytes it has live, not what the driver's "
                     "pool reserves: its row is not capped the way the others are.")
    for kind, r in results.items():
        if r.get("big_error"):
            notes.append(f"{kind}: {r['big_error']}")
    pool = results.get("fullpipe", {})
    ratio = (pool["peak_reserved"] / pool["peak_live"]) if pool.get("peak_live") else None
    return with_claims(Result(
        experiment=NAME,
        claim=CLAIM,
        verdict=verdict,
        device=common.device_info(dev),
        params={"budget": budget, "steps": steps, "allocators": list(ALLOCATORS), "quick": ctx.quick},
        metrics={"workers": results},
        bound=Bound("fullpipe pool peak live bytes", float(pool.get("peak_live") or 0), "bytes"),
        ratio=ratio,
        table=rows,
        notes=notes,
    ))
