#!/usr/bin/env bash
# Session 54, call 13: the final code: `fullpipe report --quick` through its test; then the executor's other GPU users
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
git log --oneline -1
timeout 230 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_report.py > $OUT/report-test.log 2>&1; echo "report test rc $?"; tail -2 $OUT/report-test.log
d=test-artifacts/gpu-report; mkdir -p $OUT/report; cp $d/results.json $d/console.txt $OUT/report/ 2>/dev/null
python3 - <<'PY'
import json
try:
    d = json.load(open("test-artifacts/gpu-report/results.json"))
except Exception as e:
    raise SystemExit(f"no results.json: {e}")
for r in d["results"]:
    if r["experiment"] in ("gemm-hopper", "two-level", "two-level-decode", "workloads", "overlap"):
        for c in r["claims"]:
            print(r["experiment"], "|", c.get("verdict"), "|", str(c.get("measured"))[:260])
PY
timeout 80 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_stages.py tests/gpu/test_pipelined_prefill.py > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -1 $OUT/tests.log; grep -E "^(FAILED|ERROR)" $OUT/tests.log | head
