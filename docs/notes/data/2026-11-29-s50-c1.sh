#!/usr/bin/env bash
# Session 50, call 1: a user's tour of gemm(variant="hopper") on models' Linear shapes (p320), then the GEMM GPU
# tests (session 49's 64-slice step and tidy had not run on a GPU).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
P320_BUDGET_S=230 timeout 330 python3 .dev/p320.py > $OUT/p320.log 2>&1; echo "p320 rc $?"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_hopper_gemm.py tests/gpu/test_gemm_tuning.py tests/gpu/test_gemm_transposed_b.py tests/gpu/test_skinny_gemm.py -rf > $OUT/tests-gemm.log 2>&1; echo "gemm tests rc $?"; tail -2 $OUT/tests-gemm.log
tail -8 $OUT/p320.log
