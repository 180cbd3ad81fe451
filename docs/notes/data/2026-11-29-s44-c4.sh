#!/usr/bin/env bash
# Session 44, call 4: a run at a new batch shape no longer teaches the compute its setup: pipeline GPU tests,
# p291's resnet18 run by run, bench workloads --quick.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_pipeline.py tests/gpu/test_pipeline_torch.py tests/gpu/test_pipeline_graphs.py tests/gpu/test_pipeline_records.py tests/gpu/test_threads.py -rf > $OUT/tests.log 2>&1; echo "pipeline tests rc $?"; tail -2 $OUT/tests.log
timeout 120 python3 .dev/p291.py r18 > $OUT/p291.log 2>&1; echo "p291 rc $?"; grep -E "RESULT|Error" $OUT/p291.log | cut -c1-200
timeout 240 python3 -m fullpipe bench workloads --quick --out $OUT/wq > $OUT/workloads-quick.log 2>&1; echo "workloads rc $?"; tail -25 $OUT/workloads-quick.log | cut -c1-220
