#!/usr/bin/env bash
# Session 44, call 6: the GEMM launch cache holds a prefill's products: p292 again; bench two-level --quick,
# bench attention --quick (memory exponents after an uncounted first call); two-level and GEMM GPU tests.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 120 python3 .dev/p292.py noprofile > $OUT/p292.log 2>&1; echo "p292 rc $?"; grep -E "RESULT|tokens|Error" $OUT/p292.log | tail
timeout 150 python3 -m fullpipe bench two-level --quick --out $OUT/tl > $OUT/two-level.log 2>&1; echo "two-level rc $?"; grep -iE "supported|skipped|SMs busy" $OUT/two-level.log | cut -c1-250 | head -12
timeout 150 python3 -m fullpipe bench attention --quick --out $OUT/att > $OUT/attention.log 2>&1; echo "attention rc $?"; grep -iE "supported|exponent" $OUT/attention.log | cut -c1-250 | head -12
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_two_level.py tests/gpu/test_skinny_gemm.py tests/gpu/test_models.py -rf > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -2 $OUT/tests.log
