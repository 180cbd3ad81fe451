#!/usr/bin/env bash
# Session 54, call 10: 072dab9's src (.dev/old) against the working tree (today's changes + plan.host_address):
# p368 (workload A, NumPy list) and p367 (workload C, 4000 tiny batches), alternating processes; pipeline GPU tests
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1
for i in 1 2; do
  for v in old new; do
    if [ $v = old ]; then S=$PWD/.dev/old/src; else S=$PWD/src; fi
    echo -n "$v: "; PYTHONPATH=/tmp/site:$S timeout 90 python3 .dev/p368.py 2>&1 | grep RESULT
    echo -n "$v: "; PYTHONPATH=/tmp/site:$S timeout 90 python3 .dev/p367.py 15 2>&1 | grep RESULT
  done
done
PYTHONPATH=/tmp/site:$PWD/src timeout 240 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_pipeline.py tests/gpu/test_pipeline_torch.py tests/gpu/test_threads.py tests/gpu/test_pipeline_graphs.py tests/gpu/test_pipeline_records.py tests/gpu/test_pin_cache.py tests/gpu/test_pinned_pool.py > $OUT/pipeline-tests.log 2>&1; echo "pipeline tests rc $?"; tail -1 $OUT/pipeline-tests.log; grep -E "^(FAILED|ERROR)" $OUT/pipeline-tests.log | head
