#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
timeout 200 python3 -m pytest -q -m gpu tests/gpu/test_pipeline_torch.py tests/gpu/test_pipeline_records.py tests/gpu/test_pipeline.py tests/gpu/test_pipeline_graphs.py > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -3 $OUT/tests.log; grep -E "^FAILED|^E " $OUT/tests.log | head -20
for w in default no-cudnn; do timeout 60 python3 .dev/p239.py $w 2>&1 | tail -2; done
