#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv,noheader
timeout 200 python3 -m pytest -q -p no:cacheprovider --timeout 150 tests/gpu/test_pipeline_records.py tests/gpu/test_pipeline_graphs.py tests/gpu/test_pipeline_torch.py 2>&1 | tail -3 | tee $OUT/tests.log
