#!/usr/bin/env bash
# Session 57, call 1: the transposed-product GPU tests (several row tiles, the unrun ones of s56), then p387
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r; export OUT=/tmp/r
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
timeout 240 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_gemm_transposed_b.py > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -1 $OUT/tests.log; grep -E "^(FAILED|ERROR)" $OUT/tests.log | head -20
timeout 300 python3 .dev/p387.py 129,160,200,224,250,300 > $OUT/p387.log 2>&1; echo "p387 rc $?"
grep -E "SUMMARY|WRONG|compiled|total" $OUT/p387.log
tar -czf $OUT_SAVE/c1.tgz -C /tmp/r .
