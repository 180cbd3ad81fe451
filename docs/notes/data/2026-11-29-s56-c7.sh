#!/usr/bin/env bash
# Session 56, call 7: the final rule (pairs of 128 x 256 tiles along M kept where no padding is saved); fresh held-out
# products p383 seed 387 (60, M 65-256) and 388 (30, M 100-140); p384 layer shapes; gemm GPU tests
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
mkdir -p /tmp/r; OUT_SAVE=$OUT; export OUT=/tmp/r
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv,noheader
timeout 200 python3 .dev/p383.py 387 60 > /tmp/r/p383-387.log 2>&1; echo "p383 387 rc $?"; grep -E "SUMMARY|new/old|WRONG|Error|total" /tmp/r/p383-387.log
P383_MLO=100 P383_MHI=140 timeout 150 python3 .dev/p383.py 388 30 > /tmp/r/p383-388.log 2>&1; echo "p383 388 rc $?"; grep -E "SUMMARY|new/old|WRONG|Error|total" /tmp/r/p383-388.log
timeout 150 python3 .dev/p384.py 100,120,129,160,200,224,250 > /tmp/r/p384.log 2>&1; echo "p384 rc $?"; grep -E "SUMMARY|WRONG|Error|total" /tmp/r/p384.log
timeout 300 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_gemm_tuning.py tests/gpu/test_gemm_transposed_b.py tests/gpu/test_hopper_gemm.py tests/gpu/test_models.py tests/gpu/test_two_level.py > /tmp/r/tests.log 2>&1; echo "tests rc $?"; tail -1 /tmp/r/tests.log; grep -E "^(FAILED|ERROR)" /tmp/r/tests.log | head -20
tar -czf $OUT_SAVE/c7.tgz -C /tmp/r .
