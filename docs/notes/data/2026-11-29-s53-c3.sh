#!/usr/bin/env bash
# Session 53, call 3: the hot path keeping the GIL for enqueue-only calls: pipeline GPU tests, p352 (before/after in one
# process), `fullpipe bench workloads --quick`.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 80 python3 .dev/p352.py > $OUT/p352.log 2>&1; echo "p352 rc $?"; grep RESULT $OUT/p352.log
timeout 230 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_pipeline.py tests/gpu/test_pipeline_torch.py tests/gpu/test_threads.py tests/gpu/test_pipeline_records.py tests/gpu/test_pipeline_graphs.py tests/gpu/test_pin_cache.py tests/gpu/test_pinned_pool.py > $OUT/pipeline-tests.log 2>&1; echo "pipeline tests rc $?"; tail -1 $OUT/pipeline-tests.log; grep -E "^(FAILED|ERROR)" $OUT/pipeline-tests.log | head
timeout 200 python3 -m fullpipe bench workloads --quick > $OUT/bench-workloads.log 2>&1; echo "bench rc $?"; tail -40 $OUT/bench-workloads.log
