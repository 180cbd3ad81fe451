#!/usr/bin/env bash
# Session 45, call 1: chunk='auto' chooses for the whole run (and even rows): pipeline GPU tests, p295 (nine
# torchvision models against fixed chunks), bench workloads --quick.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_pipeline.py tests/gpu/test_pipeline_torch.py tests/gpu/test_pipeline_graphs.py tests/gpu/test_pipeline_records.py tests/gpu/test_threads.py -rf > $OUT/tests.log 2>&1; echo "pipeline tests rc $?"; tail -2 $OUT/tests.log
timeout 230 python3 .dev/p295.py > $OUT/p295.log 2>&1; echo "p295 rc $?"; grep -E "RESULT|Error|error" $OUT/p295.log | cut -c1-280
timeout 150 python3 -m fullpipe bench workloads --quick --out $OUT/wq > $OUT/workloads-quick.log 2>&1; echo "workloads rc $?"; tail -22 $OUT/workloads-quick.log | cut -c1-220
