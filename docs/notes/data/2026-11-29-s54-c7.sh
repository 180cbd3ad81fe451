#!/usr/bin/env bash
# Session 54, call 7: HEAD's src (.dev/old) against the working tree (hot-path start/join events, host_view and
# records fast paths): p366 (the variable-length list, 200 runs, against compute alone), alternating processes
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1
for i in 1 2 3; do
  for v in old new; do
    if [ $v = old ]; then S=$PWD/.dev/old/src; else S=$PWD/src; fi
    echo -n "$v: "; PYTHONPATH=/tmp/site:$S timeout 60 python3 .dev/p366.py 200 2>&1 | grep RESULT
  done
done
PYTHONPATH=/tmp/site:$PWD/src timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_pipeline.py tests/gpu/test_pipeline_torch.py tests/gpu/test_threads.py tests/gpu/test_pipeline_graphs.py tests/gpu/test_pipeline_records.py > $OUT/pipeline-tests.log 2>&1; echo "pipeline tests rc $?"; tail -1 $OUT/pipeline-tests.log; grep -E "^(FAILED|ERROR)" $OUT/pipeline-tests.log | head
