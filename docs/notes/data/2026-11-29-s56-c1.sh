#!/usr/bin/env bash
# Session 56, call 1: the transposed product (swap_ab): GPU tests, sanitizers, p380 timings
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv,noheader; lscpu | grep "Model name"
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_gemm_transposed_b.py -k "transposed_product" > $OUT/tests.log 2>&1; echo "swap tests rc $?"; tail -3 $OUT/tests.log; grep -E "^(FAILED|ERROR)|Error" $OUT/tests.log | head -20
for tool in memcheck synccheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool python3 .dev/p380_san.py > $OUT/san-$tool.log 2>&1; echo "$tool rc $?"; tail -2 $OUT/san-$tool.log
done
timeout 200 python3 .dev/p380.py 200 > $OUT/p380-200.log 2>&1; echo "p380 rc $?"
cat $OUT/p380-200.log | tail -30
