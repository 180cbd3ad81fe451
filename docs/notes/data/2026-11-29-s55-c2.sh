#!/usr/bin/env bash
# Session 55, call 2: p370 old (HEAD) vs new src, alternating processes; pipeline GPU tests on the new code
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader; lscpu | grep "Model name"
for r in 1 2 3; do
  for v in old new; do
    if [ $v = old ]; then S=$PWD/.dev/old/src; else S=$PWD/src; fi
    PYTHONPATH=/tmp/site:$S timeout 60 python3 .dev/p370.py 200 $v 2>&1 | grep -E "RESULT|Error|error" | tee -a $OUT/p370.log
  done
done
export PYTHONPATH=/tmp/site:$PWD/src
timeout 240 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_pipeline.py tests/gpu/test_pipeline_torch.py tests/gpu/test_threads.py tests/gpu/test_pipeline_graphs.py tests/gpu/test_pipeline_records.py tests/gpu/test_pin_cache.py tests/gpu/test_pinned_pool.py tests/test_pipeline_bulk.py > $OUT/tests.log 2>&1; echo "pipeline tests rc $?"; tail -1 $OUT/tests.log; grep -E "^(FAILED|ERROR)" $OUT/tests.log | head
cat $OUT/p370.log
