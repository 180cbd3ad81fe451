#!/usr/bin/env bash
# Session 43, call 2: `fullpipe report --quick` through its GPU test (last run in session 20), page kept.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 480 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_report.py > $OUT/report-test.log 2>&1; echo "report test rc $?"; tail -15 $OUT/report-test.log
d=test-artifacts/gpu-report; mkdir -p $OUT/report
cp $d/index.html $d/results.json $d/console.txt $OUT/report/ 2>/dev/null; ls -la $d $d/traces 2>/dev/null | head -40
python3 - <<'PY'
import json
d = json.load(open("test-artifacts/gpu-report/results.json"))
for r in d["results"]:
    print(f"{r['experiment']:22s} {r.get('status','?'):8s} {r.get('wall_s') or 0:6.1f} s")
PY
