#!/usr/bin/env bash
# Session 56, call 5: held out: the rule with the transposed product (new) against without (old): p383 seed 384 (60
# random products), p384 (p380's layer shapes at 100-224 rows); transposed-b GPU tests; memcheck on the san script
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
mkdir -p /tmp/r; OUT_SAVE=$OUT; export OUT=/tmp/r
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv,noheader
timeout 240 python3 .dev/p383.py 384 60 > /tmp/r/p383-384.log 2>&1; echo "p383 rc $?"; grep -E "SUMMARY|new/old|WRONG|Error|total" /tmp/r/p383-384.log
timeout 150 python3 .dev/p384.py 100,129,160,200,224 > /tmp/r/p384.log 2>&1; echo "p384 rc $?"; grep -E "SUMMARY|WRONG|Error|total" /tmp/r/p384.log
timeout 150 compute-sanitizer --tool memcheck python3 .dev/p380_san.py > /tmp/r/san-memcheck.log 2>&1; echo "memcheck rc $?"; grep -v "cuGetProcAddress\|^=========     \|^========= $" /tmp/r/san-memcheck.log | tail -9
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_gemm_transposed_b.py tests/gpu/test_gemm_tuning.py > /tmp/r/tests.log 2>&1; echo "tests rc $?"; tail -1 /tmp/r/tests.log; grep -E "^(FAILED|ERROR)" /tmp/r/tests.log | head -20
tar -czf $OUT_SAVE/c5.tgz -C /tmp/r .
