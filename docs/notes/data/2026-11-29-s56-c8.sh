#!/usr/bin/env bash
# Session 56, call 8: the final rule (24 slices a cluster) on fresh held-out products: p383 seed 389 (60, M 65-256),
# p384 layer shapes at 100-250 rows; the CPU swap tests on the device's NVRTC 13.0
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
mkdir -p /tmp/r; OUT_SAVE=$OUT; export OUT=/tmp/r
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv,noheader
timeout 200 python3 .dev/p383.py 389 60 > /tmp/r/p383-389.log 2>&1; echo "p383 389 rc $?"; grep -E "SUMMARY|new/old|WRONG|Error|total" /tmp/r/p383-389.log
timeout 150 python3 .dev/p384.py 100,120,129,160,200,224,250 > /tmp/r/p384.log 2>&1; echo "p384 rc $?"; grep -E "SUMMARY|WRONG|Error|total" /tmp/r/p384.log
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_hopper_gemm_swap.py > /tmp/r/tests.log 2>&1; echo "cpu swap tests (NVRTC 13.0) rc $?"; tail -1 /tmp/r/tests.log; grep -E "^(FAILED|ERROR)" /tmp/r/tests.log | head
tar -czf $OUT_SAVE/c8.tgz -C /tmp/r .
