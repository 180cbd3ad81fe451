#!/usr/bin/env bash
# Session 56, call 6: the rule refined (swap also where the unswapped build is not 128 x 256); held out again: p383
# seed 385 (60, M 65-256) and seed 386 (30, M 113-128); gemm tuning GPU tests
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
mkdir -p /tmp/r; OUT_SAVE=$OUT; export OUT=/tmp/r
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv,noheader
timeout 240 python3 .dev/p383.py 385 60 > /tmp/r/p383-385.log 2>&1; echo "p383 385 rc $?"; grep -E "SUMMARY|new/old|WRONG|Error|total" /tmp/r/p383-385.log
P383_MLO=113 P383_MHI=128 timeout 150 python3 .dev/p383.py 386 30 > /tmp/r/p383-386.log 2>&1; echo "p383 386 rc $?"; grep -E "SUMMARY|new/old|WRONG|Error|total" /tmp/r/p383-386.log
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_gemm_tuning.py tests/test_gemm_tuning.py > /tmp/r/tests.log 2>&1; echo "tests rc $?"; tail -1 /tmp/r/tests.log; grep -E "^(FAILED|ERROR)" /tmp/r/tests.log | head -20
tar -czf $OUT_SAVE/c6.tgz -C /tmp/r .
