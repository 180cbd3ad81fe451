#!/usr/bin/env bash
# Session 56, call 12: the public gemm(variant="hopper") at a 200-token prefill (the new GPU test), then the transposed-b tests
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 120 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_gemm_transposed_b.py -k "prefill or transposed_product or x_at_w_t" > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -1 $OUT/tests.log; grep -E "^(FAILED|ERROR)|Error" $OUT/tests.log | head
