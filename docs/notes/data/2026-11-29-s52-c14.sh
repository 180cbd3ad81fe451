#!/usr/bin/env bash
# Session 52, call 1: the session's final code: the whole GPU suite, `fullpipe report --quick` through its GPU test;
# the claims of the GEMM, two-level and workloads experiments printed from the report.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
to=""; python3 -c "import pytest_timeout" 2>/dev/null && to="--timeout 200"
timeout 320 python3 -m pytest -q -p no:cacheprovider $to -rfE --durations=15 tests/gpu --ignore=tests/gpu/test_report.py > $OUT/suite.log 2>&1; echo "suite rc $?"
grep -E "passed|failed|error" $OUT/suite.log | tail -2; grep -E "^(FAILED|ERROR)" $OUT/suite.log | head -20
timeout 220 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_report.py > $OUT/report-test.log 2>&1; echo "report test rc $?"; tail -2 $OUT/report-test.log
d=test-artifacts/gpu-report; mkdir -p $OUT/report; cp $d/results.json $d/console.txt $OUT/report/ 2>/dev/null
python3 - <<'PY'
import json
try:
    d = json.load(open("test-artifacts/gpu-report/results.json"))
except Exception as e:
    raise SystemExit(f"no results.json: {e}")
for r in d["results"]:
    if r["experiment"] in ("gemm-hopper", "two-level", "two-level-decode", "workloads"):
        for c in r["claims"]:
            print(f"  {r['experiment'][:10]} {c['key'][:24]:24s} {c['verdict']:14s} {c['measured'][:140]}")
print(" ".join(f"{r['experiment']}:{r.get('verdict', r.get('status', '?'))}" for r in d["results"]))
PY
