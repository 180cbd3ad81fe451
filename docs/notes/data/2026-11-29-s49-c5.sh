#!/usr/bin/env bash
# Session 49, call 5: p312 (the long-K products of sessions 38-39 and the tests' table, every candidate);
# GEMM, models and two-level GPU tests on the new long-K rule.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 150 python3 .dev/p312.py > $OUT/p312.log 2>&1; echo "p312 rc $?"; tail -2 $OUT/p312.log
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_hopper_gemm.py tests/gpu/test_gemm_tuning.py tests/gpu/test_gemm_transposed_b.py tests/gpu/test_skinny_gemm.py tests/gpu/test_models.py tests/gpu/test_two_level.py -rf > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -2 $OUT/tests.log
