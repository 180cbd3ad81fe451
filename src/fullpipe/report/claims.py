"""The claims fullpipe tests, and how each one is judged from an experiment's numbers.

Two kinds of claim:

- :data:`CANONICAL`: the claims people make about these techniques (issue #7's
  list), each keyed to the experiment that tests it. The report's claims table
  lists every one of them, as "not run" when its experiment was not run, and as
  failed/skipped with the reason when the experiment failed or was skipped.
- further claims: an experiment's own targets (fullpipe's, stricter or more
  specific), listed after the canonical ones.

Every rule is a function of the result's JSON (``metrics``, ``table``, ``params``,
``device``), never of live objects, so a page can be rebuilt from a results.json
on a machine without a GPU. A rule whose number is missing from an old
results.json says "not measured in this results.json" instead of guessing.

An experiment fills ``Result.claims`` at the end of ``run()`` with
``return with_claims(Result(...))``; the report uses those entries when they are
there and derives them from the numbers when they are not (older results).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Iterable

from ..experiments.result import VERDICTS, Result

NOT_RUN = "not run"
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
    Canonical("clusters-remove-duplicate-loads", "clusters remove duplicate loads", "cluster"),
)
CANONICAL_KEYS = {c.key: c for c in CANONICAL}


class Missing(LookupError):
    """A number a rule needs is not in this result."""


@dataclasses.dataclass
class Judged:
    measured: str
    bound: str
    ratio: float | None
    verdict: str
    target: str


Rule = Callable[["_Data"], Judged]
_RULES: dict[str, list[tuple[str, str, Rule]]] = {}


def rule(experiment: str, key: str, claim: str | None = None):
    """Register a rule; ``claim`` defaults to the canonical claim's text."""
    text = claim if claim is not None else CANONICAL_KEYS[key].claim

    def deco(fn: Rule) -> Rule:
        _RULES.setdefault(experiment, []).append((key, text, fn))
        return fn

    return deco


def rules_for(experiment: str) -> list[tuple[str, str, Rule]]:
    return list(_RULES.get(experiment, []))


# --------------------------------------------------------------------------- access
class _Data:
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
        return self._walk("metrics", path)

    def p(self, *path: Any) -> Any:
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
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            raise Missing(f"table column {col!r}")
        return float(v)


# --------------------------------------------------------------------------- verdicts
def at_least(value: float, supported: float, partly: float) -> str:
    return "supported" if value >= supported else "partly supported" if value >= partly else "not supported"


def at_most(value: float, supported: float, partly: float) -> str:
    return "supported" if value <= supported else "partly supported" if value <= partly else "not supported"


def both(a: bool, b: bool) -> str:
    return "supported" if (a and b) else "partly supported" if (a or b) else "not supported"


def _x(v: float) -> str:
    return f"{v:.2f}×"


def _pct(v: float) -> str:
    return f"{100 * v:.1f} %"


# --------------------------------------------------------------------------- deriving
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
    d = _Data(r)
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


def with_claims(result: Result) -> Result:
    """Fill ``result.claims`` from its numbers (call at the end of ``run()``)."""
    try:
        result.claims = derive(result.as_dict(), live=True)
    except Exception as exc:  # never lose a measurement over its summary
        result.notes.append(f"claims not derived: {type(exc).__name__}: {exc}")
    return result


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


# =========================================================================== rules
# ---- overlap ---------------------------------------------------------------
def _num_ok(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _overlap(d: _Data, workload: str = "balanced"):
    serial = d.row(workload=workload, mode="serial")
    pipe = sorted(d.rows(workload=workload, mode="pipeline"), key=lambda x: x.get("streams", 0))
    if not pipe:
        raise Missing(f"table rows workload={workload!r}, mode='pipeline'")
    perfect = d.num(serial, "wall_ms") / d.num(serial, "bound_ms")
    return serial, pipe, perfect


@rule("overlap", "overlap-throughput")
def _overlap_throughput(d: _Data) -> Judged:
    serial, pipe, perfect = _overlap(d)
    # The stream counts at the main chunk size (8 MiB). The chunk sweep is reported
    # beside it, not picked from: its speedups are against serial runs at the same
    # chunk size, and small chunks make serial slower (one sync per batch), not the
    # pipeline better.
    best = max(pipe, key=lambda x: d.num(x, "speedup"))
    sp = d.num(best, "speedup")
    sweep = [x for x in d.rows(workload="balanced, chunk sweep") if _num_ok(x.get("speedup"))]
    chunk = f", {best['chunk_MiB']} MiB chunks" if best.get("chunk_MiB") else ""
    if sweep:
        chunk += ("; chunk sweep (3 streams) " + ", ".join(f"{x['chunk_MiB']} MiB {_x(x['speedup'])}" for x in sweep))
    others = []
    for w in ("copy-bound", "compute-bound"):
        rows = d.rows(workload=w, mode="pipeline")
        if rows:
            others.append(f"{w} {_x(max(d.num(x, 'speedup') for x in rows))}")
    return Judged(
        measured=(f"{_x(sp)} serial throughput ({d.num(best, 'GB/s'):.1f} GB/s), balanced workload, "
                  f"{best['streams']} streams{chunk}" + (f"; {', '.join(others)}" if others else "")),
        bound=(f"perfect overlap = serial time / slowest stage = {_x(perfect)} "
               f"(slowest stage {d.num(best, 'bound_ms'):.1f} ms, measured alone)"),
        ratio=sp / perfect, verdict=at_least(sp, 2.0, 1.5),
        target="supported ≥ 2× serial, partly ≥ 1.5×")


@rule("overlap", "stream-scaling")
def _overlap_scaling(d: _Data) -> Judged:
    serial, pipe, perfect = _overlap(d)
    engines = d.dev("copy_engines", 2) or 2
    limit = 3 if engines >= 2 else 2  # H2D engine, SMs, D2H engine (one copy engine: 2 stages)
    sp = {int(x["streams"]): d.num(x, "speedup") for x in pipe}
    ideal = {n: min(n, limit, perfect) for n in sp}
    upto = [n for n in sp if 2 <= n <= limit] or [n for n in sp if n >= 2]
    if not upto:
        raise Missing("pipeline rows with 2 or more streams")
    eff = min(sp[n] / ideal[n] for n in upto)
    top = max(upto)
    beyond = [n for n in sp if n > top]
    keep = min((sp[n] / sp[top] for n in beyond), default=1.0)
    verdict = "supported" if (eff >= 0.85 and keep >= 0.9) else "partly supported" if eff >= 0.7 else "not supported"
    return Judged(
        measured="speedup by streams " + ", ".join(f"{n}: {_x(s)}" for n, s in sorted(sp.items()))
                 + f" (balanced); worst ≤ {top} streams: {eff:.2f} of linear"
                 + (f"; beyond {top}: {keep:.2f} of the {top}-stream speedup" if beyond else ""),
        bound=(f"linear up to {limit} streams ({limit} engines: H2D copy engine, SMs, D2H copy engine), "
               f"capped at perfect overlap {_x(perfect)}; flat beyond"),
        ratio=eff, verdict=verdict,
        target=f"supported: every N ≤ {limit} within 15 % of linear and no drop > 10 % beyond; partly: within 30 %")


@rule("overlap", "overlap-targets",
      "fullpipe's pipeline reaches ≥ 0.95× the bound and ≥ 2.7× serial (balanced, ≥ 3 streams)")
def _overlap_targets(d: _Data) -> Judged:
    ratio = float(d.m("balanced_best_ratio_3plus"))
    sp = float(d.m("balanced_best_speedup_3plus"))
    bound_ms = d.num(d.row(workload="balanced", mode="serial"), "bound_ms")
    chunk = d.m_or(None, "balanced_best_chunk_MiB")
    verdict = ("supported" if ratio >= 0.95 and sp >= 2.7 else "partly supported" if sp >= 2.0
               else "not supported")
    layout = d.m_or(None, "balanced_best_layout")
    where = ", ".join(str(p) for p in (layout, f"{chunk} MiB chunks" if chunk else None) if p)
    return Judged(measured=f"{ratio:.3f}× bound, {_x(sp)} serial" + (f" (best: {where})" if where else ""),
                  bound=f"max(copies both ways at once, compute) = {bound_ms:.1f} ms", ratio=ratio,
                  verdict=verdict, target="supported: ≥ 0.95× bound and ≥ 2.7×; partly: ≥ 2×")


@rule("overlap", "enqueue-overhead", "the pipeline enqueues a batch in ≤ 20 µs of host time")
def _overlap_enqueue(d: _Data) -> Judged:
    plain = float(d.m("balanced_enqueue_us_no_events"))
    with_events = d.m_or(None, "enqueue_us_per_batch_balanced_3")
    return Judged(
        measured=f"{plain:.1f} µs per batch (alloc, H2D, launch, D2H, free)"
                 + (f"; {with_events:.1f} µs with per-stage timing events" if with_events else ""),
        bound="target 20 µs per batch", ratio=plain / 20.0, verdict=at_most(plain, 20.0, 30.0),
        target="supported ≤ 20 µs, partly ≤ 30 µs")


@rule("overlap", "trace-overhead", "a CUPTI timeline costs ≤ 5 % of the traced pipeline's time")
def _overlap_trace(d: _Data) -> Judged:
    err = d.m_or(None, "trace_overhead_error")
    if err:
        return Judged(measured=f"no trace: {err}", bound="", ratio=None, verdict="skipped", target="")
    ov = float(d.m("trace_overhead"))
    untagged = d.m_or(None, "trace_untagged_overhead")
    return Judged(measured=f"{_pct(ov)} with batch tags" + (f", {_pct(untagged)} without" if untagged else ""),
                  bound="target 5 % of the untraced run", ratio=ov / 0.05, verdict=at_most(ov, 0.05, 0.10),
                  target="supported ≤ 5 %, partly ≤ 10 %")


# ---- pinned ----------------------------------------------------------------
def _direction_overlap(rates: dict[str, float]) -> float:
    """How much H2D and D2H overlapped: (t_h2d + t_d2h - t_both) / min(t_h2d, t_d2h)
    for the same bytes (1 = fully, 0 = one after the other)."""
    th, td, tb = 1 / rates["h2d"], 1 / rates["d2h"], 1 / rates["both_each_way"]
    return (th + td - tb) / min(th, td)


@rule("pinned", "pageable-kills-overlap")
def _pageable_overlap(d: _Data) -> Judged:
    pin, page = d.m("rates", "pinned"), d.m("rates", "pageable")
    dir_page, dir_pin = max(0.0, _direction_overlap(page)), max(0.0, _direction_overlap(pin))
    both_ratio = page["both_each_way"] / pin["both_each_way"]
    kov = [float(d.m("overlap", "pageable_h2d")), float(d.m("overlap", "pageable_d2h"))]
    plain = d.m_or(None, "executor_ratio_to_pinned", "plain pageable cuMemcpyAsync, both ways")
    kills_copies = dir_page <= 0.25
    kills_kernel = max(kov) <= 0.5
    return Judged(
        measured=(f"pageable H2D ‖ D2H overlap {dir_page:.2f} (pinned {dir_pin:.2f}); both ways at once "
                  f"{page['both_each_way']:.1f} GB/s each way = {_x(both_ratio)} pinned"
                  + (f"; a pipeline on plain pageable copies {_x(plain)} pinned" if plain is not None else "")
                  + f"; copy ‖ kernel overlap {'lost' if kills_kernel else 'kept'} "
                    f"(H2D {kov[0]:.2f}, D2H {kov[1]:.2f}; 1 = full)"),
        bound=f"pinned, both ways at once = {pin['both_each_way']:.1f} GB/s each way",
        ratio=both_ratio, verdict=both(kills_copies, kills_kernel),
        target="supported: pageable copies overlap neither each other (≤ 0.25) nor a kernel (≤ 0.5); "
               "partly: one of the two")


@rule("pinned", "pinned-full-speed", "pinned host memory is needed for full-speed copies")
def _pinned_speed(d: _Data) -> Judged:
    pin, page = d.m("rates", "pinned"), d.m("rates", "pageable")
    rh, rd = page["h2d"] / pin["h2d"], page["d2h"] / pin["d2h"]
    return Judged(measured=f"pageable H2D {page['h2d']:.1f} GB/s = {_x(rh)}, D2H {page['d2h']:.1f} GB/s = {_x(rd)} pinned",
                  bound=f"pinned H2D {pin['h2d']:.1f}, D2H {pin['d2h']:.1f} GB/s", ratio=max(rh, rd),
                  verdict=at_most(max(rh, rd), 0.8, 0.95), target="supported: pageable ≤ 0.8× pinned both ways")


@rule("pinned", "pinned-ring",
      "a pageable array staged through fullpipe's pinned ring reaches ≥ 0.8× the pinned peak each way")
def _pinned_ring(d: _Data) -> Judged:
    ex = d.m("executor_ratio_to_pinned")
    h2d, both_ = float(ex["ring, H2D only"]), float(ex["ring, both ways"])
    pin = d.m("rates", "pinned")
    host = d.m_or(None, "host_memmove_bound")
    vs_host = d.m_or(None, "ring_ratio_to_host_bound")
    hb = ""
    if host:
        hb = (f"; the host's own memmove bound (pageable ↔ pinned, {host.get('threads')} threads): "
              f"{host['in_gbps']:.1f} GB/s alone, {host['both_gbps_each_way']:.1f} GB/s each way")
    return Judged(measured=f"H2D only {_x(h2d)}, both ways {_x(both_)} the pinned peak"
                           + (f"; {_x(vs_host['h2d'])} / {_x(vs_host['both'])} of the host memmove bound"
                              if vs_host else ""),
                  bound=f"pinned H2D {pin['h2d']:.1f} GB/s, both ways {pin['both_each_way']:.1f} GB/s each way{hb}",
                  ratio=min(h2d, both_), verdict=at_least(min(h2d, both_), 0.8, 0.5),
                  target="supported ≥ 0.8×, partly ≥ 0.5×")


@rule("pinned", "chunk-size", "the pipeline's H2D stage reaches ≥ 0.95× the pinned peak with chunks ≥ 8 MiB")
def _pinned_chunks(d: _Data) -> Judged:
    v = float(d.m("h2d_stage_ratio_min_chunks_8mib_up"))
    rows = d.rows(test="executor H2D stage")
    small = ", ".join(f"{r['what'].replace('chunk ', '')}: {_x(r['ratio_to_pinned'])}" for r in rows
                      if isinstance(r.get("ratio_to_pinned"), (int, float)))
    return Judged(measured=f"worst ≥ 8 MiB: {_x(v)}" + (f" (by chunk {small})" if small else ""),
                  bound=f"pinned H2D peak {d.m('rates', 'pinned', 'h2d'):.1f} GB/s", ratio=v,
                  verdict=at_least(v, 0.95, 0.8), target="supported ≥ 0.95×, partly ≥ 0.8×")


# ---- host-ring -------------------------------------------------------------
def _ring(d: _Data):
    tput = d.m("throughput_gbps")
    modes = d.p("recycle")
    return tput, modes, modes[0]


@rule("host-ring", "pinned-slots")
def _ring_slots(d: _Data) -> Judged:
    tput, _, main = _ring(d)
    g8 = tput[f"{main}_8"]
    r = {k: tput[f"{main}_{k}"] / g8 for k in (1, 3, 4) if f"{main}_{k}" in tput}
    best = max(r.get(3, 0), r.get(4, 0))
    batches = d.p("batches")
    return Judged(
        measured=(f"{batches} batches: 3 slots {tput[f'{main}_3']:.2f} GB/s = {_x(r[3])}, 4 slots {_x(r[4])} "
                  f"the throughput of 8 ({main} recycling)" + (f"; 1 slot {_x(r[1])}" if 1 in r else "")),
        bound=f"8 slots, {main} = {g8:.2f} GB/s", ratio=best, verdict=at_least(best, 0.95, 0.8),
        target="supported: 3 or 4 slots ≥ 0.95× of 8; partly ≥ 0.8×")


@rule("host-ring", "three-slots", "3 pinned slots reach ≥ 0.95× the throughput of 8 (fullpipe's target)")
def _ring_three(d: _Data) -> Judged:
    tput, _, main = _ring(d)
    v = tput[f"{main}_3"] / tput[f"{main}_8"]
    return Judged(measured=f"{_x(v)} ({main})", bound=f"8 slots = {tput[f'{main}_8']:.2f} GB/s", ratio=v,
                  verdict=at_least(v, 0.95, 0.8), target="supported ≥ 0.95×, partly ≥ 0.8×")


@rule("host-ring", "hostfn-recycle", "a native host function recycles pinned slots as fast as an event wait")
def _ring_hostfn(d: _Data) -> Judged:
    tput, modes, _ = _ring(d)
    if "hostfn" not in modes or "event" not in modes:
        raise Missing("params.recycle with both 'hostfn' and 'event'")
    h = max(tput["hostfn_3"], tput["hostfn_4"])
    e = max(tput["event_3"], tput["event_4"])
    py = max(tput.get("pyhostfn_3", 0), tput.get("pyhostfn_4", 0))
    return Judged(measured=f"hostfn {h:.2f} GB/s = {_x(h / e)} event (best of 3-4 slots)"
                           + (f"; a Python host function {_x(py / e)}" if py else ""),
                  bound=f"event wait, 3-4 slots = {e:.2f} GB/s", ratio=h / e, verdict=at_least(h / e, 0.95, 0.8),
                  target="supported ≥ 0.95×, partly ≥ 0.8×")


# ---- alloc-stall -----------------------------------------------------------
@rule("alloc-stall", "malloc-stalls-streams")
def _malloc_stall(d: _Data) -> Judged:
    spin = float(d.p("spin_ms"))
    host = float(d.m("malloc_free_host_ms"))
    row = d.row(allocator="cuMemAlloc+cuMemFree")
    waited = str(row.get("B waited for A", ""))
    n_wait, _, n_all = waited.partition("/")
    all_waited = bool(n_all) and n_wait == n_all
    some_waited = bool(n_wait) and n_wait != "0"
    return Judged(
        measured=(f"stream B's next kernel waited for stream A's {spin:g} ms kernel in {waited} rounds; the host "
                  f"blocked {host:.1f} ms (cuMemFree {d.num(row, 'free host ms'):.2f} ms, "
                  f"cuMemAlloc {d.num(row, 'alloc host ms'):.2f} ms)"),
        bound=f"stream A's kernel = {spin:g} ms (a device-wide barrier waits all of it)", ratio=host / spin,
        verdict="supported" if (all_waited and host >= 0.5 * spin) else "partly supported" if some_waited
        else "not supported",
        target="supported: B waits for A in every round and the host blocks ≥ half of A's kernel")


@rule("alloc-stall", "pool-stream-local",
      "cudaMallocAsync (the stream-ordered pool) is stream-local and returns in ≤ 100 µs")
def _pool_local(d: _Data) -> Judged:
    warm = float(d.m("pool_warm_host_ms"))
    cold = d.m_or(None, "pool_cold_host_ms")
    target = float(d.m_or(0.1, "pool_host_target_ms"))
    local = bool(d.m("pool_is_stream_local"))
    waits = "; ".join(f"{r['allocator']}: B waited {r.get('B waited for A')}" for r in d.rows()
                      if str(r.get("allocator", "")).startswith("pool"))
    return Judged(measured=f"warm pool alloc+free {warm * 1e3:.1f} µs" + (f", cold {cold * 1e3:.0f} µs" if cold else "")
                  + (f"; {waits}" if waits else ""),
                  bound=f"target {target * 1e3:.0f} µs; stream A's kernel {d.p('spin_ms')} ms", ratio=warm / target,
                  verdict=both(local, warm <= target), target="supported: B never waits and warm alloc+free ≤ 100 µs")


# ---- alloc-overhead --------------------------------------------------------
def _allocs(d: _Data):
    a = d.m("allocators")
    return a, a["fullpipe pool"], a["cuMemAlloc/cuMemFree"], a.get("preallocated (bound)")


@rule("alloc-overhead", "alloc-overhead-reduction")
def _alloc_reduction(d: _Data) -> Judged:
    _, pool, malloc, pre = _allocs(d)
    red = float(d.m("pool_cost_reduction_vs_cumemalloc"))
    return Judged(
        measured=(f"{_pct(red)} less host time in alloc+free: {pool['alloc_free_us_per_batch']:.1f} vs "
                  f"{malloc['alloc_free_us_per_batch']:.1f} µs per batch (fullpipe pool vs cuMemAlloc/cuMemFree)"),
        bound=(f"cuMemAlloc/cuMemFree = {malloc['alloc_free_us_per_batch']:.1f} µs per batch"
               + (f"; no allocation at all = {pre['alloc_free_us_per_batch']:.1f} µs" if pre else "")),
        ratio=red, verdict=at_least(red, 0.5, 0.25),
        target="supported ≥ 50 % less (more is better than claimed), partly ≥ 25 %")


@rule("alloc-overhead", "alloc-overhead-90", "the stream-ordered pool cuts allocation cost ≥ 90 % vs cudaMalloc (fullpipe's target)")
def _alloc_90(d: _Data) -> Judged:
    _, pool, malloc, _ = _allocs(d)
    red = float(d.m("pool_cost_reduction_vs_cumemalloc"))
    return Judged(measured=_pct(red), bound=f"cuMemAlloc/cuMemFree {malloc['alloc_free_us_per_batch']:.1f} µs per batch",
                  ratio=red, verdict=at_least(red, 0.9, 0.5), target="supported ≥ 90 %, partly ≥ 50 %")


@rule("alloc-overhead", "pool-pipeline-speed", "with the pool, a per-batch pipeline runs at the speed of preallocated buffers")
def _alloc_speed(d: _Data) -> Judged:
    _, pool, malloc, pre = _allocs(d)
    if pre is None:
        raise Missing("metrics.allocators['preallocated (bound)']")
    r = pool["throughput_gb_s"] / pre["throughput_gb_s"]
    rm = malloc["throughput_gb_s"] / pre["throughput_gb_s"]
    return Judged(measured=f"pool {pool['throughput_gb_s']:.1f} GB/s = {_x(r)}; cuMemAlloc/cuMemFree {_x(rm)}",
                  bound=f"preallocated buffers {pre['throughput_gb_s']:.1f} GB/s", ratio=r,
                  verdict=at_least(r, 0.95, 0.8), target="supported ≥ 0.95×, partly ≥ 0.8×")


# ---- release-threshold -----------------------------------------------------
@rule("release-threshold", "release-threshold",
      'release threshold "max" keeps reserved memory constant after the first batch; 0 returns it to the OS at each sync')
def _release(d: _Data) -> Judged:
    s = d.m("series")
    mx, zero = s['"max"'], s["0"]
    const, returns = bool(d.m("max_reserved_constant")), bool(d.m("zero_returns_at_each_sync"))
    mid = next((v for k, v in s.items() if k not in ('"max"', "0")), None)
    return Judged(
        measured=(f'"max": holds {mx["held_gib"]:.2f} GiB, {mx["steady_ms"]:.2f} ms/batch; 0: holds '
                  f'{zero["held_gib"]:.2f} GiB, {zero["steady_ms"]:.2f} ms/batch '
                  f'({_x(zero["steady_ms"] / mx["steady_ms"])} slower)'
                  + (f"; middle: {mid['held_gib']:.2f} GiB, {mid['steady_ms']:.2f} ms" if mid else "")),
        bound=f'steady time per batch with "max" = {mx["steady_ms"]:.2f} ms',
        ratio=zero["steady_ms"] / mx["steady_ms"], verdict=both(const, returns),
        target='supported: "max" reserved constant and 0 back to zero after every sync')


# ---- fragmentation ---------------------------------------------------------
def _frag(d: _Data):
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


@rule("fragmentation", "caching-allocator-oom",
      "a caching allocator can run out of memory while enough total memory is free")
def _frag_caching(d: _Data) -> Judged:
    w, budget, outcome = _frag(d)
    kinds = [k for k in ("torch-native", "torch-expandable", "cupy") if outcome(k)]
    if not kinds:
        raise Missing("a caching allocator's worker result (PyTorch or CuPy)")
    big = next(w[k]["big_request"] for k in kinds) / 2**20
    ooms = [k for k in kinds if outcome(k) != "ok"]
    return Judged(measured=f"{big:.0f} MiB request after the workload: " + ", ".join(f"{k} {outcome(k)}" for k in kinds),
                  bound=f"the request fits: budget {budget:.0f} MiB minus live bytes", ratio=None,
                  verdict="supported" if ooms else "not supported",
                  target="supported: a caching allocator fails a request that fits")


@rule("fragmentation", "pool-no-fragmentation", "the stream-ordered pool has no fragmentation problem")
def _frag_pool(d: _Data) -> Judged:
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


# ---- llm-scratch -----------------------------------------------------------
def _scratch(d: _Data):
    m = d.r.get("metrics") or {}
    bound = m.get("preallocated for max (bound)")
    pool = m.get("fullpipe pool")
    if not bound or not pool:
        raise Missing("metrics['preallocated for max (bound)'] and metrics['fullpipe pool']")
    return bound, pool, m.get("cuMemAlloc/cuMemFree")


@rule("llm-scratch", "scratch-speed",
      "per-sequence scratch from the stream-ordered pool runs at the speed of preallocated buffers")
def _scratch_speed(d: _Data) -> Judged:
    bound, pool, malloc = _scratch(d)
    r = pool["sequences_per_s"] / bound["sequences_per_s"]
    return Judged(measured=f"pool {pool['sequences_per_s']:.0f} sequences/s = {_x(r)}"
                  + (f"; cuMemAlloc/cuMemFree {_x(malloc['sequences_per_s'] / bound['sequences_per_s'])}" if malloc else ""),
                  bound=f"preallocated for the longest sequence = {bound['sequences_per_s']:.0f} sequences/s",
                  ratio=r, verdict=at_least(r, 0.9, 0.7), target="supported ≥ 0.9×, partly ≥ 0.7×")


@rule("llm-scratch", "scratch-memory", "exact-size scratch from the pool holds far less memory than preallocating for the maximum")
def _scratch_memory(d: _Data) -> Judged:
    bound, pool, _ = _scratch(d)
    r = pool["peak_bytes"] / bound["peak_bytes"]
    return Judged(measured=f"pool peak {pool['peak_bytes'] / 2**20:.0f} MiB = {_x(r)}",
                  bound=f"preallocated for max = {bound['peak_bytes'] / 2**20:.0f} MiB", ratio=r,
                  verdict=at_most(r, 0.5, 0.75), target="supported ≤ 0.5×, partly ≤ 0.75×")


@rule("llm-scratch", "scratch-vs-malloc", "the pool beats cudaMalloc/cudaFree for per-sequence scratch")
def _scratch_malloc(d: _Data) -> Judged:
    bound, pool, malloc = _scratch(d)
    if not malloc:
        raise Missing("metrics['cuMemAlloc/cuMemFree']")
    r = pool["sequences_per_s"] / malloc["sequences_per_s"]
    return Judged(measured=f"pool {_x(r)} the sequences/s of cuMemAlloc/cuMemFree",
                  bound=f"cuMemAlloc/cuMemFree = {malloc['sequences_per_s']:.0f} sequences/s", ratio=r,
                  verdict=at_least(r, 1.5, 1.05), target="supported ≥ 1.5×, partly ≥ 1.05×")


# ---- default-stream / sync / concurrency / copy-engines ----------------------
@rule("default-stream", "default-stream",
      "the legacy default stream serializes with blocking streams (one stray op is enough); "
      "non-blocking and per-thread default streams run concurrently")
def _default_stream(d: _Data) -> Judged:
    rows = d.rows()
    if not rows or "as_expected" not in rows[0]:
        raise Missing("table rows with 'as_expected'")
    alone = d.m("alone_ms")
    ideal = sum(alone.values()) / max(alone.values())
    conc = {r["case"]: d.num(r, "concurrency") for r in rows}
    nb = conc.get("3 non-blocking streams")
    wrong = [r["case"] for r in rows if not r.get("as_expected")]
    return Judged(measured="concurrency: " + ", ".join(f"{k} {v:.2f}" for k, v in conc.items())
                  + ("" if not wrong else f"; not as expected: {', '.join(wrong)}"),
                  bound=f"all three at once: sum alone / longest alone = {ideal:.2f} (1 = serial)",
                  ratio=(nb / ideal) if nb else None, verdict="supported" if not wrong else "partly supported",
                  target="supported: each case serializes (globaltimer) exactly when the claim says it should")


@rule("sync", "event-join", "joining streams with cudaStreamWaitEvent keeps the GPU busy; host-side synchronization leaves it idle")
def _sync(d: _Data) -> Judged:
    rows = d.rows()
    if not rows:
        raise Missing("table")
    sizes = sorted({r["kernel_us"] for r in rows})
    parts, ok = [], []
    for k in sizes:
        by = {r["mode"]: r for r in rows if r["kernel_us"] == k}
        ev = by["event"]
        others = [v for m, v in by.items() if m != "event"]
        ok.append(d.num(ev, "gpu_idle_fraction") <= min(d.num(o, "gpu_idle_fraction") for o in others) + 0.01
                  and d.num(ev, "items/s") >= 0.98 * max(d.num(o, "items/s") for o in others))
        parts.append(f"{k} µs kernels: GPU idle " + ", ".join(f"{m} {_pct(d.num(v, 'gpu_idle_fraction'))}"
                                                              for m, v in by.items()))
    short = next(r for r in rows if r["kernel_us"] == sizes[0] and r["mode"] == "event")
    return Judged(measured="; ".join(parts),
                  bound=f"items × kernel time = {d.num(short, 'bound_ms'):.0f} ms ({sizes[0]} µs kernels): "
                        f"event join at {d.num(short, 'ratio'):.2f}× it",
                  ratio=d.num(short, "ratio"), verdict=at_least(sum(ok) / len(ok), 1.0, 0.5),
                  target="supported: event join has the least idle time and the most items/s at every kernel length")


@rule("concurrency", "sm-sharing", "blocks of different kernels run on one SM at the same time")
def _sm_sharing(d: _Data) -> Judged:
    s = d.m("sharing")
    return Judged(measured=f"up to {s['most_kernels_on_one_sm_at_once']} different kernels on one SM at once; "
                           f"{s['sms_shared_by_2plus_kernels']} of {s['sms_used']} SMs shared",
                  bound=f"{s['kernels']} kernels launched", ratio=s["most_kernels_on_one_sm_at_once"] / s["kernels"],
                  verdict="supported" if s["sms_shared_by_2plus_kernels"] > 0 else "not supported",
                  target="supported: any SM ran blocks of two kernels at the same instant")


@rule("concurrency", "resident-grids", "at most 128 grids (the resident-grid limit) run at once")
def _resident(d: _Data) -> Judged:
    res = d.m("resident")
    limit = int(d.p("limit_from_spec"))
    over = {int(g): v["ran_at_once"] for g, v in res.items() if int(g) > limit}
    under = {int(g): v["ran_at_once"] for g, v in res.items() if int(g) <= limit}
    if not over:
        raise Missing("a run with more grids than the limit")
    ok = all(v == limit for v in over.values()) and all(v == g for g, v in under.items())
    return Judged(measured="; ".join(f"{g} launched → {v} at once" for g, v in sorted({**under, **over}.items())),
                  bound=f"max resident grids (CUDA spec) = {limit}", ratio=max(over.values()) / limit,
                  verdict="supported" if ok else "not supported",
                  target="supported: exactly the limit above it, all of them below it")


@rule("copy-engines", "copy-engines",
      "with two or more copy engines, H2D, D2H and a kernel run at the same time (together ≈ the longest alone)")
def _copy_engines(d: _Data) -> Judged:
    ov = d.m("overlap_ratio")
    alone = d.m("alone_ms")
    engines = int(d.m_or(d.dev("copy_engines", 2), "async_engine_count"))
    all3 = float(ov["H2D + D2H + compute"])
    row = d.row(work="H2D + D2H + compute")
    verdict = at_least(all3, 0.9, 0.7) if engines >= 2 else ("supported" if ov["H2D + D2H"] < 0.7 else "not supported")
    return Judged(measured=(f"all three together {d.num(row, 'ms'):.2f} ms = {1 / all3:.2f}× the longest alone, "
                            f"{d.num(row, 'speedup_vs_serial'):.2f}× faster than one after another; pairs: "
                            + ", ".join(f"{k} {v:.2f}" for k, v in ov.items() if k != "H2D + D2H + compute")),
                  bound=f"longest alone = {max(alone.values()):.2f} ms (asyncEngineCount {engines})", ratio=all3,
                  verdict=verdict, target="supported: longest alone / together ≥ 0.9, partly ≥ 0.7")


# ---- gemm / cluster / persistent ------------------------------------------
def _gemm(d: _Data):
    rows = [r for r in d.rows() if isinstance(r.get("TFLOP/s"), (int, float)) and isinstance(r.get("size"), int)]
    if not rows:
        raise Missing("table rows with TFLOP/s")
    big = max(r["size"] for r in rows)

    def best(kernel: str):
        cand = [r for r in rows if r["size"] == big and r["kernel"] == kernel]
        if not cand:
            raise Missing(f"table row kernel={kernel!r} at {big}^3")
        return max(cand, key=lambda r: r["TFLOP/s"])

    return big, best


def _st(r: dict) -> str:
    return f" ({r['stages']} stages)" if r.get("stages") else ""


@rule("gemm", "double-buffer-beats-tiled")
def _gemm_db(d: _Data) -> Judged:
    big, best = _gemm(d)
    db, tiled = best("double_buffer"), best("tiled")
    r = db["TFLOP/s"] / tiled["TFLOP/s"]
    cub = d.m_or(None, f"cublas_float32_{big}_tflops")
    forced = ""
    try:  # the same two kernels at equal occupancy (one block per SM), where measured
        fdb, ft = best("double_buffer @1 block/SM"), best("tiled @1 block/SM")
        forced = f"; at one block per SM each: {_x(fdb['TFLOP/s'] / ft['TFLOP/s'])}"
    except Missing:
        pass
    return Judged(measured=f"double_buffer {db['TFLOP/s']:.1f} TFLOP/s{_st(db)} = {_x(r)} tiled (fp32, {big}³){forced}",
                  bound=f"tiled {tiled['TFLOP/s']:.1f} TFLOP/s" + (f"; cuBLAS fp32 {cub:.1f}" if cub else ""),
                  ratio=r, verdict=at_least(r, 1.05, 1.0),
                  target="supported ≥ 1.05× (beats it beyond noise), partly ≥ 1.0×")


@rule("gemm", "warp-specialization-beats-double-buffer")
def _gemm_ws(d: _Data) -> Judged:
    big, best = _gemm(d)
    ws, db = best("warp_specialized"), best("double_buffer")
    r = ws["TFLOP/s"] / db["TFLOP/s"]
    return Judged(measured=f"warp_specialized {ws['TFLOP/s']:.1f} TFLOP/s{_st(ws)} = {_x(r)} double_buffer (fp32, {big}³)",
                  bound=f"double_buffer {db['TFLOP/s']:.1f} TFLOP/s{_st(db)}", ratio=r, verdict=at_least(r, 1.05, 1.0),
                  target="supported ≥ 1.05×, partly ≥ 1.0×")


@rule("gemm", "double-buffer-1.3x", "multi-stage async copies make the GEMM ≥ 1.3× faster than load-then-compute (fullpipe's target)")
def _gemm_db13(d: _Data) -> Judged:
    big, best = _gemm(d)
    r = best("double_buffer")["TFLOP/s"] / best("tiled")["TFLOP/s"]
    ceiling = ""
    try:  # double_buffer with its copies taken out: what any pipeline could reach
        c = best("no-load ceiling")["TFLOP/s"]
        ceiling = f"; no-load ceiling {c:.1f} TFLOP/s = {_x(c / best('tiled')['TFLOP/s'])} tiled"
    except Missing:
        pass
    return Judged(measured=f"{_x(r)} ({big}³){ceiling}", bound=f"tiled {best('tiled')['TFLOP/s']:.1f} TFLOP/s", ratio=r,
                  verdict=at_least(r, 1.3, 1.0), target="supported ≥ 1.3×, partly ≥ 1.0×")


@rule("gemm", "fp32-vs-cublas", "the best fp32 kernel reaches ≥ 0.6× cuBLAS fp32")
def _gemm_fp32(d: _Data) -> Judged:
    big, best = _gemm(d)
    cands = []
    for k in ("tiled", "double_buffer", "warp_specialized"):
        try:
            cands.append(best(k))
        except Missing:
            pass
    top = max(cands, key=lambda r: r["TFLOP/s"]) if cands else None
    cub = best("cuBLAS float32")
    if top is None:
        raise Missing("fp32 kernel rows")
    r = top["TFLOP/s"] / cub["TFLOP/s"]
    return Judged(measured=f"{top['kernel']}{_st(top)} {top['TFLOP/s']:.1f} TFLOP/s = {_x(r)}",
                  bound=f"cuBLAS fp32 (TF32 off) {cub['TFLOP/s']:.1f} TFLOP/s at {big}³", ratio=r,
                  verdict=at_least(r, 0.6, 0.4), target="supported ≥ 0.6×, partly ≥ 0.4×")


@rule("gemm", "wmma-vs-cublas", "wmma tensor-core kernels reach ≥ 0.4× cuBLAS (fp16 and bf16)")
def _gemm_wmma(d: _Data) -> Judged:
    big, best = _gemm(d)
    parts, ratios, bounds = [], [], []
    for dt in ("float16", "bfloat16"):
        w, c = best(f"wmma {dt}"), best(f"cuBLAS {dt}")
        ratios.append(w["TFLOP/s"] / c["TFLOP/s"])
        parts.append(f"{dt} {w['TFLOP/s']:.0f} TFLOP/s = {_x(ratios[-1])}")
        bounds.append(f"{dt} {c['TFLOP/s']:.0f}")
    r = min(ratios)
    return Judged(measured="; ".join(parts) + f" ({big}³)", bound="cuBLAS " + ", ".join(bounds) + " TFLOP/s",
                  ratio=r, verdict=at_least(r, 0.4, 0.3), target="supported ≥ 0.4×, partly ≥ 0.3×")


@rule("cluster", "clusters-remove-duplicate-loads")
def _cluster(d: _Data) -> Judged:
    size = int(d.p("cluster"))
    t = float(d.m("time_own_over_shared"))
    # Measured A-load instructions own_a / shared_a (ncu): "ncu_a_loads_own_over_shared"
    # since shared_a loads its quarter with LDG; results recorded when both kernels loaded
    # A with cp.async call it "ncu_a_ldgsts_own_over_shared". Older results only have the
    # A bytes attributed from L2 reads.
    instr = d.m_or(None, "ncu_a_loads_own_over_shared")
    if instr is None:
        instr = d.m_or(None, "ncu_a_ldgsts_own_over_shared")
    l2_bytes = d.m_or(None, "ncu_a_bytes_own_over_shared")
    measured_cut = instr if instr is not None else l2_bytes
    cut = float(measured_cut) if measured_cut is not None else float(d.m("a_bytes_ratio_own_over_shared"))
    own = d.m_or(None, "cluster_gemm_own_a_a_bytes")
    shared = d.m_or(None, "cluster_gemm_shared_a_a_bytes")
    removed = cut >= 0.9 * size
    if instr is not None:
        src = f"{cut:.2f}× fewer A-load instructions (ncu, {d.m_or('?', 'ncu_size')}³)"
    elif l2_bytes is not None:
        src = f"A from L2 {cut:.2f}× fewer bytes (ncu, {d.m_or('?', 'ncu_size')}³)"
    else:
        mib = f"A from global {own / 2**20:.0f} → {shared / 2**20:.0f} MiB, " if own and shared else ""
        src = f"{mib}{cut:.1f}× fewer loads (by the kernels' construction, not measured)"
    speed = f"{_x(t)} faster" if t >= 1 else f"{_x(1 / t)} slower"
    return Judged(measured=f"{src}; sharing through DSMEM is {speed}",
                  bound=f"cluster of {size}: at most {size}× fewer A loads; time of the own-A kernel "
                        f"{d.m_or(float('nan'), 'cluster_gemm_own_a_ms'):.2f} ms",
                  ratio=cut / size,
                  verdict="supported" if (removed and t >= 0.95) else "partly supported" if removed else "not supported",
                  target="supported: A loads cut ≥ 0.9 × the cluster size and not slower (≥ 0.95×); partly: cut but slower")


@rule("persistent", "persistent-queue", "on many small tiles a persistent grid pulling from an atomic queue is ≥ 1.5× one block per tile")
def _persistent(d: _Data) -> Judged:
    sp = {k[len("speedup_"):]: float(v) for k, v in (d.r.get("metrics") or {}).items()
          if k.startswith("speedup_") and isinstance(v, (int, float))}
    if not sp:
        raise Missing("metrics.speedup_*")
    best = max(sp.values())
    per = [r for r in d.rows(kernel="one block per tile") if isinstance(r.get("ms"), (int, float))]
    return Judged(measured="persistent speedup " + ", ".join(f"{k}: {_x(v)}" for k, v in sp.items()),
                  bound="one block per tile, same tile code" + (
                      ": " + ", ".join(f"{r['shape']} {r['ms'] * 1e3:.0f} µs" for r in per) if per else ""),
                  ratio=best, verdict=at_least(best, 1.5, 1.1), target="supported ≥ 1.5×, partly ≥ 1.1×")
