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

from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
import json
import subprocess
import sys
from typing import Any

from . import _alloc_common as common
from ._alloc_worker import ALLOCATORS
from .result import Bound, Result
from .claims import UNJUDGED, Data, Judged, Missing, is_num, rule, with_claims
from .figures import BOUND, GREY, PINNED, label_bars, need, pyplot, save

NAME = "fragmentation"
TITLE = "Fragmentation under a capped budget: caching allocators vs the stream-ordered pool"
CLAIM = ("a caching allocator can run out of memory with enough total free memory; "
         "the stream-ordered allocator has no fragmentation problem")
TECHNIQUE = (  # what the technique is, for a reader who has not met it (the report's page)
    "A caching allocator keeps freed blocks for reuse; with interleaved lifetimes and growing buffers it "
    "can end up with enough free memory in total but no block large enough for a request. The claim is "
    "that the driver's stream-ordered pool does not have this problem."
)
# The claims whose verdicts make this experiment's verdict (claims.summary): the two claims its CLAIM makes.
VERDICT_FROM = ("caching-allocator-oom", "pool-no-fragmentation")

WORKER_TIMEOUT_S = 150
CACHING = ("torch-native", "torch-expandable", "cupy")  # the caching allocators among ALLOCATORS
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


def worker_verdict(results: dict[str, dict[str, Any]]) -> tuple[str, list[str]]:
    """What run() passes to with_claims: failed (and why) when the fullpipe pool's own
    worker gave no result, else UNJUDGED (the rules below judge the claims), with a
    note when no caching allocator could run."""
    pool = results.get("fullpipe", {})
    if "big_ok" not in pool:
        return "failed", [f"fullpipe worker: {pool.get('error') or pool.get('skipped')}"]
    if not any("big_ok" in results.get(k, {}) for k in CACHING):
        return UNJUDGED, ["no caching allocator ran (PyTorch and CuPy both missing): only half the claim is tested"]
    return UNJUDGED, []


def run(ctx) -> Result:
    dev = ctx.device
    budget = (1 if ctx.quick else 2) * common.GiB
    steps = 300 if ctx.quick else 1200
    # The workers run at once: each caps its own process's allocator at the budget and
    # nothing here is timed, so they need not take turns (five budgets fit on any GPU
    # this runs on; a worker that cannot get its memory reports it).
    with ThreadPoolExecutor(len(ALLOCATORS)) as workers:
        futures = {kind: workers.submit(run_worker, kind, budget, steps) for kind in ALLOCATORS}
        for i, fut in enumerate(as_completed(futures.values())):
            ctx.progress((i + 1) / len(ALLOCATORS), f"{i + 1} of {len(ALLOCATORS)} allocators done")
    results, rows = {}, []
    for kind in ALLOCATORS:
        r = results[kind] = futures[kind].result()
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
    verdict, notes = worker_verdict(results)
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
    ), VERDICT_FROM)


# --------------------------------------------------------------------------- verdicts
def _frag(d: Data):
    w = d.m("workers")
    budget = float(d.p("budget")) / 2**20

    def outcome(kind: str) -> str | None:
        r = w.get(kind) or {}
        if "big_ok" not in r:
            return None
        if r.get("workload_failed"):
            return "workload OOM"
        return "ok" if r["big_ok"] else "OOM"

    return w, budget, outcome


@rule(NAME, "caching-allocator-oom",
      "a caching allocator can run out of memory while enough total memory is free")
def _frag_caching(d: Data) -> Judged:
    w, budget, outcome = _frag(d)
    kinds = [k for k in CACHING if outcome(k)]
    if not kinds:
        reasons = "; ".join(f"{k}: {(w.get(k) or {}).get('skipped') or (w.get(k) or {}).get('error') or 'not run'}"
                            for k in CACHING)
        return Judged(measured=f"no caching allocator ran ({reasons})", bound="", ratio=None, verdict="skipped",
                      target="")
    big = next(w[k]["big_request"] for k in kinds) / 2**20
    ooms = [k for k in kinds if outcome(k) != "ok"]
    return Judged(measured=f"{big:.0f} MiB request after the workload: " + ", ".join(f"{k} {outcome(k)}" for k in kinds),
                  bound=f"the request fits: budget {budget:.0f} MiB minus live bytes", ratio=None,
                  verdict="supported" if ooms else "not supported",
                  target="supported: a caching allocator fails a request that fits")


@rule(NAME, "pool-no-fragmentation", "the stream-ordered pool has no fragmentation problem")
def _frag_pool(d: Data) -> Judged:
    w, budget, outcome = _frag(d)
    o = outcome("fullpipe")
    if o is None:
        raise Missing("metrics.workers.fullpipe")
    r = w["fullpipe"]
    ra = outcome("torch-async")
    return Judged(measured=(f"fullpipe pool: {r['big_request'] / 2**20:.0f} MiB request {o}; peak reserved "
                            f"{r['peak_reserved'] / 2**20:.0f} MiB for {r['peak_live'] / 2**20:.0f} MiB live"
                            + (f"; PyTorch cudaMallocAsync backend {ra} (not capped the same way)" if ra else "")),
                  bound=f"budget {budget:.0f} MiB", ratio=r["peak_reserved"] / r["peak_live"] if r["peak_live"] else None,
                  verdict="supported" if o == "ok" else "not supported",
                  target="supported: the pool serves the request that fits")


# --------------------------------------------------------------------------- figure
def figures(r: dict, out: Path) -> dict[str, Path]:
    """The page's figure, drawn from the result's JSON into the folder ``out``."""
    plt = pyplot()
    rows = [x for x in r.get("table") or [] if is_num(x.get("peak live MiB"))]
    need(rows, "table['peak live MiB']")
    budget = (r.get("params") or {}).get("budget")
    fig, ax = plt.subplots(figsize=(11, 0.6 * len(rows) + 1.6))
    ys = range(len(rows))
    ax.barh([y - 0.2 for y in ys], [x["peak live MiB"] for x in rows], height=0.4, color=GREY, label="peak live")
    label_bars(ax, ax.barh([y + 0.2 for y in ys], [x.get("peak reserved MiB") or 0 for x in rows], height=0.4,
                            color=PINNED, label="peak reserved"), "{:.0f} MiB")
    for y, x in enumerate(rows):
        outcome = x.get("large request")
        ax.annotate(f"{x.get('large request MiB', 0):.0f} MiB request: {outcome}", (0, y - 0.2), xytext=(4, 0),
                    textcoords="offset points", va="center", fontsize=8,
                    color="#7d1d1d" if outcome != "ok" else "#145c2a", fontweight="bold")
    if is_num(budget):
        ax.axvline(budget / 2**20, color=BOUND, ls="--", lw=1.2, label=f"budget ({budget / 2**20:.0f} MiB)")
    ax.set_yticks(list(ys), [x["allocator"] for x in rows])
    ax.invert_yaxis()
    ax.set_xlabel("MiB")
    ax.set_title("same workload under a capped budget: reserved vs live, and the large request")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    return {"fragmentation: reserved vs live memory per allocator": save(fig, out / f"{NAME}.png")}
