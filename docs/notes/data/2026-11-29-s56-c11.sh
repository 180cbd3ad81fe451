#!/usr/bin/env bash
# Session 56, call 11: where gemm(variant="hopper") runs the skinny kernel at 65-128 rows: skinny against the
# persistent builds (p386: layer shapes + 30 random products, seed 392); the gemm GPU tests on the final rule
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
mkdir -p /tmp/r; OUT_SAVE=$OUT; export OUT=/tmp/r
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv,noheader
timeout 150 python3 .dev/p386.py 392 30 > /tmp/r/p386.log 2>&1; echo "p386 rc $?"; grep -E "SUMMARY|WRONG|Error|total" /tmp/r/p386.log
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_gemm_transposed_b.py tests/gpu/test_gemm_tuning.py tests/gpu/test_hopper_gemm.py > /tmp/r/tests.log 2>&1; echo "tests rc $?"; tail -1 /tmp/r/tests.log; grep -E "^(FAILED|ERROR)" /tmp/r/tests.log | head
tar -czf $OUT_SAVE/c11.tgz -C /tmp/r .
