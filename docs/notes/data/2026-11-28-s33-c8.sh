#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
export PYTHONPATH=/tmp/site:$PWD/src
timeout 120 python3 -m pytest -q -p no:cacheprovider --timeout 100 tests/gpu/test_pipeline_torch.py tests/gpu/test_pipeline_records.py > $OUT/tests.log 2>&1; echo "tests rc $?"; grep -E "^FAILED|^ERROR" $OUT/tests.log | head; tail -1 $OUT/tests.log
for r in 1 2 3; do
  PYTHONPATH=/tmp/site:$PWD/.dev/old/src timeout 30 python3 .dev/p228.py old 2>&1 | tail -1
  PYTHONPATH=/tmp/site:$PWD/src timeout 30 python3 .dev/p228.py new 2>&1 | tail -2
done
