#!/usr/bin/env bash
# Session 57, call 13: the final code: GPU tests of the Hopper GEMM (transposed b, tuning, hopper_gemm); p391
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r; export OUT=/tmp/r
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_gemm_transposed_b.py tests/gpu/test_gemm_tuning.py tests/gpu/test_hopper_gemm.py > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -1 $OUT/tests.log; grep -E "^(FAILED|ERROR)" $OUT/tests.log | head
timeout 60 python3 .dev/p391_model.py 100,200,300,384,512,768,1000 > $OUT/p391.log 2>&1; echo "p391 rc $?"; tail -7 $OUT/p391.log
tar -czf $OUT_SAVE/c13.tgz -C /tmp/r .
