#!/usr/bin/env bash
# Session 57, call 8: hold-out of the 64-row blocks on 128-byte lines (seeds 402-404, K multiples of 64), the layer
# shapes at 129-300 rows against the rule before the session; the transposed-b GPU tests
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r; export OUT=/tmp/r
timeout 100 python3 .dev/p389.py 402 40 65 256 1024 8448 2048 16384 64 > $OUT/p389-402.log 2>&1; echo "402 rc $?"
timeout 100 python3 .dev/p389.py 403 30 65 256 1024 4224 4096 16384 64 > $OUT/p389-403.log 2>&1; echo "403 rc $?"
timeout 100 python3 .dev/p389.py 404 30 257 768 1024 8448 2048 16384 64 > $OUT/p389-404.log 2>&1; echo "404 rc $?"
timeout 120 python3 .dev/p389.py layers 129,160,200,224,250,300 > $OUT/p389-layers2.log 2>&1; echo "layers rc $?"
grep -hE "SUMMARY|WRONG" $OUT/p389-*.log | grep -v "(0)"
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_gemm_transposed_b.py > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -1 $OUT/tests.log; grep -E "^(FAILED|ERROR)" $OUT/tests.log | head
tar -czf $OUT_SAVE/c8.tgz -C /tmp/r .
