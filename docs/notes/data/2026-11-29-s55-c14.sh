#!/usr/bin/env bash
# Session 55, call 14: the records' GPU tests and the torch pipeline tests on the final code (record_field as one as_strided)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
timeout 240 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_pipeline_records.py tests/gpu/test_pipeline_torch.py tests/test_pipeline_records.py > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -1 $OUT/tests.log; grep -E "^(FAILED|ERROR)" $OUT/tests.log | head
timeout 60 python3 .dev/u5.py 0 2>&1 | grep RESULT
