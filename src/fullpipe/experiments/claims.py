"""Claims and verdicts: the types, the canonical claims list, and how an experiment's
rules turn its numbers into verdicts.

Two kinds of claim:

- :data:`CANONICAL`: the claims people make about these techniques, each keyed to
  the experiment that tests it. The report's claims table lists every one of them,
  as "not run" when its experiment was not run, and as failed/skipped with the
  reason when the experiment failed or was skipped.
- further claims: an experiment's own targets (fullpipe's, stricter or more
  specific), listed after the canonical ones.

Each experiment module holds its own rules, registered with :func:`rule`::

    @rule(NAME, "overlap-throughput")
    def _throughput(d: Data) -> Judged: ...

A rule is a function of the result's JSON (``metrics``, ``table``, ``params``,
``device``) read through :class:`Data`, never of live objects, so a page can be
rebuilt from a results.json on a machine without a GPU. A number missing from an
old results.json raises :class:`Missing`, and the claim says "not measured in this
results.json" instead of guessing.

An experiment fills ``Result.claims`` at the end of ``run()`` with
``return with_claims(Result(...), VERDICT_FROM)``; the report uses those entries
when they are there and derives them from the numbers when they are not (older
results).

Each claim is judged in one place, its rule. The experiment's own verdict (the
badge on its section of the page) is not judged again: it is :func:`summary` of
the verdicts of the claims its module names in ``VERDICT_FROM``:

- an experiment that tests canonical claims names exactly those, so its verdict
  is the verdict the claims table shows for them;
- an experiment without a canonical claim names the claims its ``CLAIM``
  sentence makes.

``run()`` itself only says when its numbers cannot be trusted (verdict
"failed": wrong output, a broken dependency) or were not taken ("skipped"), and
otherwise passes :data:`UNJUDGED`, which :func:`with_claims` replaces.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Callable, Iterable

from .result import VERDICTS, Result

NOT_RUN = "not run"
# The verdict run() gives a trustworthy measurement before with_claims() replaces it
# with the summary of VERDICT_FROM (a valid verdict, so a Result is always well-formed;
# with_claims() never leaves it in place: the summary, or "failed" if that cannot be made).
UNJUDGED = "not supported"
NOT_MEASURED = "not measured"
STATUSES = VERDICTS + (NOT_RUN, NOT_MEASURED)


@dataclasses.dataclass(frozen=True)
class Canonical:
    key: str
    claim: str
    experiment: str


CANONICAL: tuple[Canonical, ...] = (
    Canonical("overlap-throughput", "2–3× throughput with proper stream overlap", "overlap"),
    Canonical("stream-scaling", "near-linear scaling with streams (up to the hardware limit)", "overlap"),
    Canonical("pageable-kills-overlap", "pageable memory kills overlap", "pinned"),
    Canonical("pinned-slots", "3–4 pinned slots handle hundreds of batches", "host-ring"),
    Canonical("malloc-stalls-streams", "cudaMalloc stalls all streams", "alloc-stall"),
    Canonical("alloc-overhead-reduction",
              "50–80 % reduction in allocation overhead with the stream-ordered allocator", "alloc-overhead"),
    Canonical("double-buffer-beats-tiled", "a double-buffered kernel beats the tiled one", "gemm"),
    Canonical("warp-specialization-beats-double-buffer", "warp specialization beats double buffering", "gemm"),
    # The same claims on Hopper's own machinery (TMA, wgmma, multicast), each right after
    # its SIMT form, and the claim that such a kernel reaches cuBLAS.
    Canonical("warp-specialization-beats-double-buffer-hopper",
              "warp specialization beats double buffering (Hopper: TMA + wgmma)", "gemm-hopper"),
    Canonical("tma-wgmma-reaches-cublas", "a from-scratch TMA + wgmma kernel reaches cuBLAS", "gemm-hopper"),
    Canonical("clusters-remove-duplicate-loads", "clusters remove duplicate loads", "cluster"),
    Canonical("clusters-remove-duplicate-loads-hopper", "clusters remove duplicate loads (Hopper: TMA multicast)",
              "gemm-hopper"),
    # Beyond one GPU (issue 19): peer copies against the link, and beside the other engines;
    # the layer stack split over the GPUs of one host.
    Canonical("peer-copy-link-bound", "peer copies between two GPUs reach ≥ 0.9× the link's rate each way",
              "multi-gpu"),
    Canonical("peer-copy-overlap", "peer copies overlap H2D, D2H and compute (copy engines busy at once)",
              "multi-gpu"),
    Canonical("multi-gpu-stack-scaling",
              "the layer stack on N GPUs reaches ≥ 0.85 × N × one GPU's throughput (enough micro-batches)",
              "multi-gpu"),
    # Both levels together (issue 18): the layer stack prefilling variable-length requests.
    Canonical("two-level-prefill",
              "two levels of pipelining (streams + pool + pipelined kernels) prefill variable-length requests at "
              "≥ 1.3× PyTorch eager's tokens/s", "two-level"),
    Canonical("two-level-sm-busy", "with both levels the SMs are busy ≥ 90 % of a prefill's span", "two-level"),
    Canonical("two-level-memory",
              "exact-size scratch from the stream-ordered pool holds ≤ 0.6× the memory of preallocating for the "
              "longest request", "two-level"),
    Canonical("two-level-no-malloc", "no cudaMalloc in steady state (the pool's memory is reused)", "two-level"),
)
CANONICAL_KEYS = {c.key: c for c in CANONICAL}


class Missing(LookupError):
    """A number a rule needs is not in this result."""


@dataclasses.dataclass
class Judged:
    """What a rule returns: the number measured, what it was compared to, and the verdict."""

    measured: str
    bound: str
    ratio: float | None
    verdict: str
    target: str


Rule = Callable[["Data"], Judged]
_RULES: dict[str, list[tuple[str, str, Rule]]] = {}


def rule(experiment: str, key: str, claim: str | None = None):
    """Register a rule of ``experiment`` for claim ``key``; ``claim`` defaults to the
    canonical claim's text. Rules are listed in the order they are registered."""
    text = claim if claim is not None else CANONICAL_KEYS[key].claim

    def deco(fn: Rule) -> Rule:
        _RULES.setdefault(experiment, []).append((key, text, fn))
        return fn

    return deco


def rules_for(experiment: str) -> list[tuple[str, str, Rule]]:
    """The rules of an experiment (importing its module registers them)."""
    if experiment not in _RULES:
        from . import load

        try:
            load(experiment)
        except ValueError:  # not an experiment of this fullpipe
            pass
    return list(_RULES.get(experiment, []))


# --------------------------------------------------------------------------- reading a result
class Data:
    """Read a result dict; anything absent raises Missing naming what was needed."""

    def __init__(self, r: dict[str, Any]):
        self.r = r

    def _walk(self, root: str, path: tuple[Any, ...]) -> Any:
        x = self.r.get(root)
        for p in path:
            if isinstance(x, dict) and p in x:
                x = x[p]
            elif isinstance(x, dict) and str(p) in x:
                x = x[str(p)]
            else:
                raise Missing(f"{root}." + ".".join(str(q) for q in path))
        if x is None:
            raise Missing(f"{root}." + ".".join(str(q) for q in path))
        return x

    def m(self, *path: Any) -> Any:
        """metrics[path...]"""
        return self._walk("metrics", path)

    def p(self, *path: Any) -> Any:
        """params[path...]"""
        return self._walk("params", path)

    def m_or(self, default: Any, *path: Any) -> Any:
        try:
            return self.m(*path)
        except Missing:
            return default

    def dev(self, key: str, default: Any = None) -> Any:
        return (self.r.get("device") or {}).get(key, default)

    def rows(self, **match: Any) -> list[dict[str, Any]]:
        return [row for row in self.r.get("table") or []
                if all(row.get(k) == v for k, v in match.items())]

    def row(self, **match: Any) -> dict[str, Any]:
        rows = self.rows(**match)
        if not rows:
            raise Missing("table row " + ", ".join(f"{k}={v!r}" for k, v in match.items()))
        return rows[0]

    @staticmethod
    def num(row: dict[str, Any], col: str) -> float:
        v = row.get(col)
        if not is_num(v):
            raise Missing(f"table column {col!r}")
        return float(v)


def is_num(v: Any) -> bool:
    """A finite real number (not a bool): a JSON number, or a NumPy scalar in a figure."""
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


# --------------------------------------------------------------------------- verdicts
def at_least(value: float, supported: float, partly: float) -> str:
    return "supported" if value >= supported else "partly supported" if value >= partly else "not supported"


def at_most(value: float, supported: float, partly: float) -> str:
    return "supported" if value <= supported else "partly supported" if value <= partly else "not supported"


def both(a: bool, b: bool) -> str:
    return "supported" if (a and b) else "partly supported" if (a or b) else "not supported"


def times(v: float) -> str:
    """2.6912 -> '2.69×'"""
    return f"{v:.2f}×"


def percent(v: float) -> str:
    """0.944 -> '94.4 %'"""
    return f"{100 * v:.1f} %"


# --------------------------------------------------------------------------- claim rows
_FAILURE_WORDS = ("did not match", "differs", "wrong", "relative error", "error", "failed", "timed out",
                  "skipped", "missing", "not ")


def failure_reason(r: dict[str, Any]) -> str:
    """Why an experiment failed or was skipped: the note that says so, else its first note."""
    lines = [str(n).strip().splitlines()[0] for n in r.get("notes") or [] if str(n).strip()]
    for word in _FAILURE_WORDS:
        for line in lines:
            if word in line.lower():
                return line[:300]
    return lines[0][:300] if lines else f"experiment {r.get('verdict', 'failed')}"


def _row(key: str, text: str, **kw: Any) -> dict[str, Any]:
    return {"key": key, "claim": text, "measured": kw.get("measured", ""), "bound": kw.get("bound", ""),
            "ratio": kw.get("ratio"), "verdict": kw.get("verdict", "failed"), "target": kw.get("target")}


def derive(r: dict[str, Any], *, live: bool = False) -> list[dict[str, Any]]:
    """Claim rows for one result dict. ``live``: called at the end of an experiment's
    run, where a missing number is a bug (verdict failed) rather than old data."""
    verdict = r.get("verdict", "failed")
    rules = rules_for(r.get("experiment", ""))
    if not rules:  # an experiment without rules: its own claim, bound and ratio
        b = r.get("bound")
        return [_row(r.get("experiment", ""), r.get("claim", ""),
                     measured=(r.get("metrics") or {}).get("headline", "") if verdict not in ("failed", "skipped")
                     else failure_reason(r),
                     bound=f"{b['name']} = {b['value']:.4g} {b['unit']}" if b else "",
                     ratio=r.get("ratio"), verdict=verdict)]
    out = []
    d = Data(r)
    for key, text, fn in rules:
        if verdict in ("failed", "skipped"):
            out.append(_row(key, text, measured=failure_reason(r), verdict=verdict))
            continue
        try:
            j = fn(d)
        except Missing as exc:
            if live:
                out.append(_row(key, text, measured=f"not recorded by the experiment: {exc}", verdict="failed"))
            else:
                out.append(_row(key, text, measured=f"not measured in this results.json (needs {exc})",
                                verdict=NOT_MEASURED))
            continue
        except Exception as exc:  # a rule must never take the report down
            out.append(_row(key, text, measured=f"could not judge: {type(exc).__name__}: {exc}",
                            verdict="failed" if live else NOT_MEASURED))
            continue
        ratio = j.ratio if (j.ratio is None or math.isfinite(j.ratio)) else None
        out.append(_row(key, text, measured=j.measured, bound=j.bound, ratio=ratio, verdict=j.verdict,
                        target=j.target))
    return out


def with_claims(result: Result, verdict_from: tuple[str, ...] = ()) -> Result:
    """Fill ``result.claims`` from its numbers (call at the end of ``run()``).

    ``verdict_from``: the experiment's ``VERDICT_FROM``, the claims whose verdicts
    make its own verdict (see :func:`summary` and this module's docstring); a result
    that failed or was skipped keeps its verdict. Empty: the verdict is left as it
    is (the report's runner, for a result that failed before it had numbers)."""
    try:
        result.claims = derive(result.as_dict(), live=True)
    except Exception as exc:  # never lose a measurement over its summary
        result.notes.append(f"claims not derived: {type(exc).__name__}: {exc}")
        if verdict_from and result.verdict != "skipped":
            result.verdict = "failed"
        return result
    if verdict_from and result.verdict not in ("failed", "skipped"):
        by_key = {c["key"]: c["verdict"] for c in result.claims}
        result.verdict = summary([by_key.get(k, "failed") for k in verdict_from])
    return result


def summary(verdicts: list[str]) -> str:
    """One verdict for several claims: failed if any failed, skipped if all were
    skipped, supported if all are supported, partly supported if any is at least
    partly (a skipped claim counts as not supported beside judged ones: only part
    of the claim was tested), else not supported."""
    if not verdicts or "failed" in verdicts:
        return "failed"
    if all(v == "skipped" for v in verdicts):
        return "skipped"
    if all(v == "supported" for v in verdicts):
        return "supported"
    if any(v in ("supported", "partly supported") for v in verdicts):
        return "partly supported"
    return "not supported"


def claims_of(r: dict[str, Any]) -> list[dict[str, Any]]:
    """The claim rows of one result: those it recorded, completed by derived ones
    for any canonical claim of its experiment that it did not record."""
    recorded = [dict(c) for c in (r.get("claims") or []) if isinstance(c, dict)]
    if not recorded:
        return derive(r)
    keys = {c.get("key") for c in recorded}
    wanted = [c.key for c in CANONICAL if c.experiment == r.get("experiment") and c.key not in keys]
    if wanted:
        recorded += [c for c in derive(r) if c["key"] in wanted]
    return recorded


def claims_table(results: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(canonical rows, further rows), each row with its ``experiment``. Every
    canonical claim is there: "not run" when its experiment is not in ``results``."""
    results = list(results)
    by_exp = {r.get("experiment"): r for r in results}
    per_exp = {name: claims_of(r) for name, r in by_exp.items()}
    canonical = []
    for c in CANONICAL:
        if c.experiment not in by_exp:
            canonical.append({**_row(c.key, c.claim, measured=f"the {c.experiment} experiment was not run",
                                     verdict=NOT_RUN), "experiment": c.experiment})
            continue
        found = next((x for x in per_exp[c.experiment] if x.get("key") == c.key), None)
        if found is None:
            found = _row(c.key, c.claim, measured="the experiment recorded no number for this claim",
                         verdict=NOT_MEASURED)
        canonical.append({**found, "claim": c.claim, "experiment": c.experiment})
    further = []
    for name, rows in per_exp.items():
        for x in rows:
            if x.get("key") not in CANONICAL_KEYS:
                further.append({**x, "experiment": name})
    return canonical, further
