#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1
P=docs/notes/data/2026-11-28-s32-p223.py
for i in 1 2; do
  PYTHONPATH=/tmp/site:$PWD/.dev/old/src timeout 100 python3 $P old ab 2>&1 | tee -a $OUT/p223.log | grep -v "^ "
  PYTHONPATH=/tmp/site:$PWD/src timeout 100 python3 $P new ab 2>&1 | tee -a $OUT/p223.log | grep -v "^ "
done
PYTHONPATH=/tmp/site:$PWD/src timeout 100 python3 $P new groups 2>&1 | tee -a $OUT/p223.log
export PYTHONPATH=/tmp/site:$PWD/src
timeout 200 python3 -m pytest -q -p no:cacheprovider --timeout 120 tests/gpu/test_pipeline_torch.py tests/gpu/test_pipeline_records.py tests/gpu/test_pipeline.py > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -3 $OUT/tests.log
