#!/usr/bin/env bash
# Session 51, call 4: N not a multiple of 8 from w.T (padded C rows): GEMM GPU tests, p333 (GPT-2's head vs torch)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 120 python3 .dev/p333.py > $OUT/p333.log 2>&1; echo "p333 rc $?"
timeout 400 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_gemm_transposed_b.py tests/gpu/test_hopper_gemm.py tests/gpu/test_skinny_gemm.py tests/gpu/test_gemm_tuning.py -x > $OUT/tests.log 2>&1; echo "tests rc $?"
tail -15 $OUT/tests.log | cut -c1-300
grep RESULT $OUT/p333.log; tail -3 $OUT/p333.log
