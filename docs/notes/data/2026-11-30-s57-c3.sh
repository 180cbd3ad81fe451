#!/usr/bin/env bash
# Session 57, call 3: hold-out of the session-57 rule (p389): seeds 394 (65-256 rows), 395 (257-1200), 396 (the
# 64-row blocks' one-wave regime), the layer shapes at 384-1024 rows; GPU tests of the transposed product
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r; export OUT=/tmp/r
timeout 150 python3 .dev/p389.py 396 30 129 240 4224 8448 4096 12288 > $OUT/p389-396.log 2>&1; echo "396 rc $?"
timeout 150 python3 .dev/p389.py 395 80 257 1200 > $OUT/p389-395.log 2>&1; echo "395 rc $?"
timeout 150 python3 .dev/p389.py layers 384,448,512,640,768,1024 > $OUT/p389-layers.log 2>&1; echo "layers rc $?"
timeout 100 python3 .dev/p389.py 394 60 65 256 > $OUT/p389-394.log 2>&1; echo "394 rc $?"
grep -hE "SUMMARY|WRONG|compiled|total|Error" $OUT/p389-*.log
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_gemm_transposed_b.py tests/gpu/test_gemm_tuning.py > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -1 $OUT/tests.log; grep -E "^(FAILED|ERROR)" $OUT/tests.log | head -20
tar -czf $OUT_SAVE/c3.tgz -C /tmp/r .
