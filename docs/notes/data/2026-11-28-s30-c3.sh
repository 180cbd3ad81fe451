#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv,noheader
timeout 300 python3 -m pytest -q -p no:cacheprovider --timeout 200 tests/gpu/test_pipeline_records.py > $OUT/gpu-tests.log 2>&1; echo "tests rc $?"
grep -E "passed|failed|Error|assert" $OUT/gpu-tests.log | tail -15
timeout 200 python3 .dev/p201.py 2>&1 | grep -v Warn | tee $OUT/p201.log | tail -12
