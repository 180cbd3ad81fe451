#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 150 python3 -m pytest -q -p no:cacheprovider --timeout 120 tests/gpu/test_pipeline_torch.py tests/gpu/test_pipeline_records.py tests/gpu/test_threads.py > $OUT/tests.log 2>&1; echo "tests rc $?"; grep -E "passed|failed|Error|assert" $OUT/tests.log | tail -15
timeout 200 python3 .dev/p226.py 2>&1 | tee $OUT/p226.log | tail -40
timeout 110 python3 -m fullpipe.cli bench workloads --out $OUT/wl > $OUT/wl.log 2>&1; echo "wl rc $?"; python3 .dev/wlsum.py $OUT/wl/workloads.json
