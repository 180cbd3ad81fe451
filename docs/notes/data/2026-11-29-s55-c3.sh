#!/usr/bin/env bash
# Session 55, call 3: p371 (a DataLoader's idle workers and the variable-length list); the fake-driver CPU tests on a GPU machine
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader; lscpu | grep "Model name"
timeout 150 python3 .dev/p371.py 2>&1 | grep -E "RESULT|Error|error" | tee $OUT/p371.log
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_pipeline_bulk.py tests/test_pipeline_fakecuda.py > $OUT/tests.log 2>&1; echo "fake tests rc $?"; tail -1 $OUT/tests.log; grep -E "^(FAILED|ERROR)" $OUT/tests.log | head
