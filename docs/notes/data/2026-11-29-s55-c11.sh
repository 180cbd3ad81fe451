#!/usr/bin/env bash
# Session 55, call 11: u4 after the trial change (16 passes: each pass's time and way); the pipeline GPU tests of lists
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
timeout 120 python3 .dev/u4.py 16 > $OUT/u4.log 2>&1; echo "u4 rc $?"; grep -E "pass|RESULT" $OUT/u4.log | cut -c1-200
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_pipeline_torch.py tests/gpu/test_threads.py > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -1 $OUT/tests.log; grep -E "^(FAILED|ERROR)" $OUT/tests.log | head
