#!/usr/bin/env bash
# Session 52, call 8: the kept stream-K workspace with the skinny kernel's launches fixed: the GEMM GPU tests, the
# model tests, p341 twice (host time a call), then `fullpipe report --quick` through its GPU test.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_hopper_gemm.py tests/gpu/test_skinny_gemm.py tests/gpu/test_gemm_transposed_b.py tests/gpu/test_gemm_tuning.py > $OUT/gemm-tests.log 2>&1; echo "gemm tests rc $?"; tail -1 $OUT/gemm-tests.log; grep -E "^(FAILED|ERROR)" $OUT/gemm-tests.log | head
timeout 120 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_models.py tests/gpu/test_decode.py tests/gpu/test_two_level.py tests/gpu/test_pipelined_prefill.py tests/gpu/test_stages.py > $OUT/model-tests.log 2>&1; echo "model tests rc $?"; tail -1 $OUT/model-tests.log; grep -E "^(FAILED|ERROR)" $OUT/model-tests.log | head
for i in 1 2; do timeout 60 python3 .dev/p341.py > $OUT/p341-$i.log 2>&1; echo "p341 rc $?"; grep RESULT $OUT/p341-$i.log; done
timeout 230 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_report.py > $OUT/report-test.log 2>&1; echo "report test rc $?"; tail -2 $OUT/report-test.log
d=test-artifacts/gpu-report; mkdir -p $OUT/report; cp $d/results.json $d/console.txt $OUT/report/ 2>/dev/null
python3 - <<'PY'
import json
try:
    d = json.load(open("test-artifacts/gpu-report/results.json"))
except Exception as e:
    raise SystemExit(f"no results.json: {e}")
for r in d["results"]:
    if r["experiment"] in ("gemm-hopper", "two-level", "two-level-decode", "workloads", "gemm", "persistent"):
        for c in r["claims"]:
            print(f"  {r['experiment'][:10]} {c['key'][:24]:24s} {c['verdict']:14s} {c['measured'][:150]}")
print(" ".join(f"{r['experiment']}:{r.get('verdict', r.get('status', '?'))}" for r in d["results"]))
PY
