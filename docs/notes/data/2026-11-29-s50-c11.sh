#!/usr/bin/env bash
# Session 50, call 11: the GEMM GPU tests on the final rule (the off-sector one-cluster-row share).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_hopper_gemm.py tests/gpu/test_gemm_tuning.py tests/gpu/test_gemm_transposed_b.py tests/gpu/test_skinny_gemm.py -rf > $OUT/tests-gemm.log 2>&1; echo "gemm tests rc $?"; tail -2 $OUT/tests-gemm.log
