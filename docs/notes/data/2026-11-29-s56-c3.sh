#!/usr/bin/env bash
# Session 56, call 3: swap GPU tests and sanitizers (after the one-block widths), p380 at 100/129/160/256 rows, p382 seed 382
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv,noheader
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_gemm_transposed_b.py > $OUT/tests.log 2>&1; echo "transposed-b tests rc $?"; tail -1 $OUT/tests.log; grep -E "^(FAILED|ERROR)" $OUT/tests.log | head -20
for tool in memcheck synccheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool python3 .dev/p380_san.py > $OUT/san-$tool.log 2>&1; echo "$tool rc $?"; grep -v "cuGetProcAddress\|^=========     \|^========= $" $OUT/san-$tool.log | tail -8
done
for r in 100 129 160 256; do timeout 100 python3 .dev/p380.py $r > $OUT/p380-$r.log 2>&1; echo "p380 $r rc $?"; grep -E "SUMMARY|WRONG|Error" $OUT/p380-$r.log; done
timeout 200 python3 .dev/p382.py 382 60 > $OUT/p382-382.log 2>&1; echo "p382 rc $?"; grep -E "SUMMARY|WRONG|Error|total" $OUT/p382-382.log
