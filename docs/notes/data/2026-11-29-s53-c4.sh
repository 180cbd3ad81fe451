#!/usr/bin/env bash
# Session 53, call 4: the hot path keeping the GIL: the new GIL test and the GPU tests of everything that uses the hot
# path (pool, runtime, stages, trace, two-level, prefill, role stamps), then `fullpipe report --quick` through its test.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 170 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_pipeline.py tests/gpu/test_pool.py tests/gpu/test_runtime.py tests/gpu/test_stages.py tests/gpu/test_trace.py tests/gpu/test_two_level.py tests/gpu/test_pipelined_prefill.py tests/gpu/test_role_stamps.py > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -1 $OUT/tests.log; grep -E "^(FAILED|ERROR)" $OUT/tests.log | head
timeout 230 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_report.py > $OUT/report-test.log 2>&1; echo "report test rc $?"; tail -2 $OUT/report-test.log
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
            print(r["experiment"], "|", c.get("verdict"), "|", str(c.get("measured"))[:300])
PY
