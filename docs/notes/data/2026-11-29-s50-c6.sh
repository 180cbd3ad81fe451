#!/usr/bin/env bash
# Session 50, call 6: after the short-K rule and the host-path polish: the GEMM GPU tests, p321 (host time in pieces),
# p320 (models' shapes).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 100 python3 .dev/p321.py > $OUT/p321.log 2>&1; echo "p321 rc $?"
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_hopper_gemm.py tests/gpu/test_gemm_tuning.py tests/gpu/test_gemm_transposed_b.py tests/gpu/test_skinny_gemm.py -rf > $OUT/tests-gemm.log 2>&1; echo "gemm tests rc $?"; tail -2 $OUT/tests-gemm.log
P320_BUDGET_S=100 timeout 150 python3 .dev/p320.py > $OUT/p320.log 2>&1; echo "p320 rc $?"
head -18 $OUT/p321.log; tail -4 $OUT/p320.log
