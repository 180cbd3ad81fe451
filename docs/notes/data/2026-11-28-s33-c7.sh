#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 150 python3 -m pytest -q -p no:cacheprovider --timeout 120 tests/gpu/test_pipeline_torch.py tests/gpu/test_pipeline_records.py > $OUT/tests.log 2>&1; echo "tests rc $?"; grep -E "^FAILED|^ERROR" $OUT/tests.log | head; tail -1 $OUT/tests.log
timeout 80 python3 .dev/p226.py "x*2" MLP > $OUT/p226.log 2>&1; grep "^|" $OUT/p226.log
