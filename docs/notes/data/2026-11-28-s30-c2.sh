#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv,noheader
timeout 300 python3 -m pytest -q -p no:cacheprovider --timeout 200 tests/gpu/test_pipeline_records.py tests/gpu/test_pipeline_torch.py tests/gpu/test_threads.py > $OUT/gpu-tests.log 2>&1; echo "tests rc $?"
tail -15 $OUT/gpu-tests.log
timeout 200 python3 .dev/p201.py 2>&1 | tee $OUT/p201.log | tail -20
