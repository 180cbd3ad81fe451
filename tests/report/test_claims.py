"""The claims table of the recorded H200 results (tests/data/report/results.json and the
later runs tests/report/recorded.py appends) against a golden file (tests/data/report/claims.json) captured from fullpipe's code before the
rules moved into the experiment modules. Two tables:

- "page": the rows the page shows: the claims each experiment recorded, completed by
  its rules;
- "from_rules": the same results with their recorded claims taken out, so that every
  experiment's rules judge the recorded numbers themselves.

A rule whose text, bound, ratio or verdict changes fails here. After a deliberate
change to a rule, rewrite the golden file with
``PYTHONPATH=src python3 -m tests.report.test_claims`` and review its diff."""

from __future__ import annotations

import ast
import copy
import json
from pathlib import Path

import pytest

from fullpipe import experiments
from fullpipe.experiments.claims import CANONICAL, claims_table, rules_for
from tests.report.recorded import AWAITING_RECORD, DATA, load_doc

GOLDEN = DATA / "claims.json"


def tables() -> dict[str, list[dict]]:
    results = load_doc()["results"]
    canonical, further = claims_table(copy.deepcopy(results))
    stripped = [{**copy.deepcopy(r), "claims": []} for r in results]
    rc, rf = claims_table(stripped)
    return {"page": canonical + further, "from_rules": rc + rf}


@pytest.fixture(scope="module")
def golden() -> dict[str, list[dict]]:
    return json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("table", ["page", "from_rules"])
def test_claims_rows_match_the_golden_file(golden, table):
    got = tables()[table]
    want = golden[table]
    assert [r["key"] for r in got] == [r["key"] for r in want]
    for g, w in zip(got, want):
        for col in ("experiment", "claim", "measured", "bound", "ratio", "verdict", "target"):
            assert g[col] == w[col], (g["key"], col)


def test_every_rule_judges_the_recorded_numbers(golden):
    """Each experiment's rules are all exercised by the recorded results: no rule is
    silently dropped (a claim key missing from the golden file) or left untested."""
    judged = {r["key"] for r in golden["from_rules"]}
    for name in experiments.names():
        if name in AWAITING_RECORD:
            continue
        for key, _, _ in rules_for(name):
            assert key in judged, (name, key)
    assert [r["key"] for r in golden["page"][:len(CANONICAL)]] == [c.key for c in CANONICAL]


def test_experiments_awaiting_a_recorded_run_have_none_yet(golden):
    """AWAITING_RECORD names registered experiments with no recorded result and no golden
    row yet, and none of them tests a canonical claim (the claims table would show it "not run")."""
    recorded = {r["experiment"] for r in load_doc()["results"]}
    golden_experiments = {r["experiment"] for r in golden["page"] + golden["from_rules"]}
    for name in AWAITING_RECORD:
        assert name in experiments.names(), name
        assert name not in recorded and name not in golden_experiments, f"{name} is recorded now: drop it"
        assert not any(c.experiment == name for c in CANONICAL), name



# Headline verdicts that moved when run()'s inline judging gave way to VERDICT_FROM, on the
# recorded run (why: docs/notes/2026-11-23-verdicts.md). Experiment -> (recorded, derived).
MOVED = {"pinned": ("not supported", "partly supported")}


def _recorded() -> list[dict]:
    return load_doc()["results"]


def test_every_experiment_names_the_claims_its_verdict_comes_from():
    """VERDICT_FROM names rules of the experiment itself; an experiment that tests
    canonical claims takes its verdict from exactly those (the claims table's rows)."""
    for name in experiments.names():
        mod = experiments.load(name)
        keys = [k for k, _, _ in rules_for(name)]
        assert mod.VERDICT_FROM and set(mod.VERDICT_FROM) <= set(keys), (name, mod.VERDICT_FROM, keys)
        canonical = tuple(c.key for c in CANONICAL if c.experiment == name)
        if canonical:
            assert mod.VERDICT_FROM == canonical, name


@pytest.mark.parametrize("name", [r["experiment"] for r in _recorded()])
def test_the_headline_verdict_is_the_verdict_of_its_claims(name):
    """What the end of run() does, on the recorded numbers: whatever verdict run() put in
    the Result, with_claims makes it the summary of the VERDICT_FROM claims as the page
    shows them (for a canonical claim: its row in the claims table); failed and skipped
    stay. On the recorded run that is the recorded verdict, but for the moves listed."""
    from fullpipe.experiments.claims import UNJUDGED, summary, with_claims
    from fullpipe.experiments.result import Result

    recorded = next(r for r in _recorded() if r["experiment"] == name)
    verdict_from = experiments.load(name).VERDICT_FROM
    canonical, further = claims_table([{**copy.deepcopy(recorded), "claims": []}])
    shown = {r["key"]: r["verdict"] for r in canonical + further if r["experiment"] == name}
    want = summary([shown[k] for k in verdict_from])
    for start in (UNJUDGED, "supported", "partly supported"):
        res = Result.from_dict({**copy.deepcopy(recorded), "claims": [], "verdict": start})
        assert with_claims(res, verdict_from).verdict == want, (name, start)
    if len(verdict_from) == 1 and verdict_from[0] in {c.key for c in CANONICAL}:
        assert want == next(r["verdict"] for r in canonical if r["key"] == verdict_from[0])
    assert (recorded["verdict"], want) == MOVED.get(name, (recorded["verdict"], recorded["verdict"]))
    for kept in ("failed", "skipped"):
        res = Result.from_dict({**copy.deepcopy(recorded), "claims": [], "verdict": kept})
        assert with_claims(res, verdict_from).verdict == kept


def _is_rule(fn: "ast.FunctionDef") -> bool:
    return any(isinstance(d, ast.Call) and getattr(d.func, "id", None) == "rule" for d in fn.decorator_list)


JUDGING = {"verdict_from_ratio", "at_least", "at_most", "both", "summary"}
VERDICT_WORDS = {"supported", "partly supported", "not supported"}


@pytest.mark.parametrize("name", experiments.names())
def test_no_experiment_judges_outside_its_rules(name):
    """Outside its @rule functions an experiment module writes no verdict word and calls
    no verdict helper, and its run() hands every Result to with_claims with its
    VERDICT_FROM: run() can say failed or skipped, nothing else."""
    mod = experiments.load(name)
    tree = ast.parse(Path(mod.__file__).read_text())
    rule_nodes = {id(n) for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef) and _is_rule(fn)
                  for n in ast.walk(fn)}
    for node in ast.walk(tree):
        if id(node) in rule_nodes:
            continue
        if isinstance(node, ast.Constant) and node.value in VERDICT_WORDS:
            raise AssertionError(f"{name}: verdict {node.value!r} written outside a rule (line {node.lineno})")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in JUDGING:
            raise AssertionError(f"{name}: {node.func.id}() called outside a rule (line {node.lineno})")
    run = next(fn for fn in tree.body if isinstance(fn, ast.FunctionDef) and fn.name == "run")
    calls = [n for n in ast.walk(run) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    judged = [c for c in calls if c.func.id == "with_claims"]
    assert judged, f"{name}: run() does not call with_claims"
    for c in judged:
        args = c.args[1:] + [k.value for k in c.keywords if k.arg == "verdict_from"]
        assert [getattr(a, "id", None) for a in args] == ["VERDICT_FROM"], f"{name}: line {c.lineno}"
    # every Result that run() returns goes through with_claims (or is skipped/failed)
    for ret in (n for n in ast.walk(run) if isinstance(n, ast.Return) and isinstance(n.value, ast.Call)):
        if getattr(ret.value.func, "id", None) == "Result":
            verdict = ret.value.args[2] if len(ret.value.args) > 2 else next(
                k.value for k in ret.value.keywords if k.arg == "verdict")
            assert isinstance(verdict, ast.Constant) and verdict.value in ("failed", "skipped"), \
                f"{name}: run() returns a Result that with_claims never saw (line {ret.lineno})"


def test_experiments_never_import_report():
    """Layers point down: report/ imports experiments/, never the other way."""
    folder = Path(experiments.__file__).parent
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                mod = ("." * node.level) + (node.module or "")
                assert not mod.startswith(("..report", "fullpipe.report")), (path.name, mod)
            elif isinstance(node, ast.Import):
                assert not any(a.name.startswith("fullpipe.report") for a in node.names), path.name


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps(tables(), indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {GOLDEN}")
