#!/usr/bin/env bash
# Session 57, call 7: hold-out of one wave of 64-row blocks above 256 rows (seeds 400, 401, K multiples of 64); the
# layer shapes at 384-1024 rows again with the final rule; GPU tests of the Hopper GEMM
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r; export OUT=/tmp/r
timeout 100 python3 .dev/p389.py 400 30 257 512 2112 4224 4096 16384 64 > $OUT/p389-400.log 2>&1; echo "400 rc $?"; grep -E "SUMMARY M=257|WRONG" $OUT/p389-400.log
timeout 100 python3 .dev/p389.py 401 30 513 768 1408 2816 4096 16384 64 > $OUT/p389-401.log 2>&1; echo "401 rc $?"; grep -E "SUMMARY M=513|WRONG" $OUT/p389-401.log
timeout 200 python3 .dev/p391_model.py 100,200,300,384,448,512,777,1000 > $OUT/p391.log 2>&1; echo "p391 rc $?"; tail -8 $OUT/p391.log
timeout 330 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_gemm_transposed_b.py tests/gpu/test_gemm_tuning.py tests/gpu/test_hopper_gemm.py > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -1 $OUT/tests.log; grep -E "^(FAILED|ERROR)" $OUT/tests.log | head -20
tar -czf $OUT_SAVE/c7.tgz -C /tmp/r .
