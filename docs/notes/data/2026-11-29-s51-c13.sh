#!/usr/bin/env bash
# Session 51, call 13: the final code (the list's choice following its latest runs): the pipeline GPU tests that
# run lists, and `fullpipe report --quick` through its GPU test
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_threads.py tests/gpu/test_pipeline.py tests/gpu/test_pipeline_records.py tests/gpu/test_pipeline_graphs.py > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -2 $OUT/tests.log | cut -c1-300
timeout 175 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_report.py > $OUT/report-test.log 2>&1; echo "report test rc $?"; tail -2 $OUT/report-test.log
d=test-artifacts/gpu-report; mkdir -p $OUT/report; cp $d/results.json $OUT/report/ 2>/dev/null
python3 - <<'PY'
import json
d = json.load(open("test-artifacts/gpu-report/results.json"))
for r in d["results"]:
    if r["experiment"] == "workloads":
        for c in r["claims"]:
            print(f"  {c['key'][:24]:24s} {c['verdict']:14s} {c['measured'][:300]}")
print(" ".join(f"{r['experiment']}:{r.get('verdict', r.get('status', '?'))}" for r in d["results"]))
PY
