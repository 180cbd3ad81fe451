#!/usr/bin/env bash
# Session 49, call 10: after the review: the GEMM GPU tests (the rule's new stream-K cases among them).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_hopper_gemm.py tests/gpu/test_gemm_tuning.py tests/gpu/test_gemm_transposed_b.py -rf > $OUT/tests-gemm.log 2>&1; echo "gemm tests rc $?"; tail -2 $OUT/tests-gemm.log
