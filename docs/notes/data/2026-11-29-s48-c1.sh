#!/usr/bin/env bash
# Session 48, call 1: session 47's final code (d796117) on a GPU: p302 (a new pageable array after pinned runs; a short
# first run), the whole GPU suite, then `fullpipe report --quick` through its GPU test.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
to=""; python3 -c "import pytest_timeout" 2>/dev/null && to="--timeout 200"
timeout 80 python3 .dev/p302.py > $OUT/p302.log 2>&1; echo "p302 rc $?"; cat $OUT/p302.log | cut -c1-220
timeout 320 python3 -m pytest -q -p no:cacheprovider $to -rfE --durations=15 tests/gpu --ignore=tests/gpu/test_report.py > $OUT/suite.log 2>&1; echo "suite rc $?"
grep -E "passed|failed|error" $OUT/suite.log | tail -2; grep -E "^(FAILED|ERROR)" $OUT/suite.log | head -20
timeout 180 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_report.py > $OUT/report-test.log 2>&1; echo "report test rc $?"; tail -4 $OUT/report-test.log
d=test-artifacts/gpu-report; mkdir -p $OUT/report; cp $d/results.json $d/console.txt $OUT/report/ 2>/dev/null
python3 - <<'PY'
import json
try:
    d = json.load(open("test-artifacts/gpu-report/results.json"))
except Exception as e:
    raise SystemExit(f"no results.json: {e}")
for r in d["results"]:
    print(f"{r['experiment']:22s} {r.get('status','?'):18s} {r.get('wall_s') or 0:6.1f} s")
PY
