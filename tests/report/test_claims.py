"""The claims table of the recorded H200 report (tests/data/report/results.json) against
a golden file (tests/data/report/claims.json) captured from fullpipe's code before the
rules moved into the experiment modules. Two tables:

- "page": the rows the page shows: the claims each experiment recorded, completed by
  its rules;
- "from_rules": the same results with their recorded claims taken out, so that every
  experiment's rules judge the recorded numbers themselves.

A rule whose text, bound, ratio or verdict changes fails here. After a deliberate
change to a rule, rewrite the golden file with
``PYTHONPATH=src python3 -m tests.report.test_claims`` and review its diff."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from fullpipe import experiments
from fullpipe.experiments.claims import CANONICAL, claims_table, rules_for

DATA = Path(__file__).resolve().parents[1] / "data" / "report"
GOLDEN = DATA / "claims.json"


def tables() -> dict[str, list[dict]]:
    results = json.loads((DATA / "results.json").read_text())["results"]
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
        for key, _, _ in rules_for(name):
            assert key in judged, (name, key)
    assert [r["key"] for r in golden["page"][:len(CANONICAL)]] == [c.key for c in CANONICAL]



def test_experiments_judged_by_their_claims_keep_the_recorded_verdicts():
    """gemm, cluster and persistent take their own verdict from their claims
    (VERDICT_FROM) instead of judging the same numbers a second time; on the recorded
    run that gives the verdict their inline judgement recorded then."""
    from fullpipe.experiments.claims import with_claims
    from fullpipe.experiments.result import Result

    results = json.loads((DATA / "results.json").read_text())["results"]
    judged = [n for n in experiments.names() if getattr(experiments.load(n), "VERDICT_FROM", ())]
    assert {"gemm", "cluster", "persistent"} <= set(judged)
    for name in judged:
        recorded = next(r for r in results if r["experiment"] == name)
        for start in ("not supported", "supported"):  # whatever the run put there first
            res = Result.from_dict({**copy.deepcopy(recorded), "claims": [], "verdict": start})
            assert with_claims(res, experiments.load(name).VERDICT_FROM).verdict == recorded["verdict"], name
        failed = Result.from_dict({**copy.deepcopy(recorded), "claims": [], "verdict": "failed"})
        assert with_claims(failed, experiments.load(name).VERDICT_FROM).verdict == "failed"


def test_experiments_never_import_report():
    """Layers point down: report/ imports experiments/, never the other way."""
    import ast

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
