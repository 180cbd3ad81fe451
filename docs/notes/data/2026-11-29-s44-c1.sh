#!/usr/bin/env bash
# Session 44, call 1: GEMM tuning GPU tests with whole-tile candidates; p288 (held-out products, rule and
# measured plans); p289 (fullpipe's defaults on models not in its tests).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gemm_tuning.py -rf > $OUT/tests.log 2>&1; echo "tuning tests rc $?"; tail -2 $OUT/tests.log
timeout 200 python3 .dev/p288.py > $OUT/p288.log 2>&1; echo "p288 rc $?"; tail -4 $OUT/p288.log
timeout 240 python3 .dev/p289.py > $OUT/p289.log 2>&1; echo "p289 rc $?"; grep -E "RESULT|Error|error" $OUT/p289.log | tail -12
