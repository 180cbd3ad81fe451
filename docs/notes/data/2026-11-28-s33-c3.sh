#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 100 python3 -m pytest -q -p no:cacheprovider --timeout 90 tests/gpu/test_pipeline_torch.py -k "long_list or short_list or encoder_layer" > $OUT/tests.log 2>&1; echo "tests rc $?"; grep -E "passed|failed|Error|assert" $OUT/tests.log | tail -8
timeout 230 python3 .dev/p226.py 2>&1 > $OUT/p226.log; grep -v "^  [a-z]" $OUT/p226.log | grep -v "^$" | tail -30
timeout 120 python3 -m fullpipe.cli bench workloads --out $OUT/wl > $OUT/wl.log 2>&1; echo "wl rc $?"; python3 .dev/wlsum.py $OUT/wl/workloads.json
