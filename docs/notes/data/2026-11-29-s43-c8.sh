#!/usr/bin/env bash
# Session 43, call 8: the final stream-K rule (runs of 16 slices or more): GEMM, models and two-level GPU tests; memcheck, synccheck (p287).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for t in memcheck synccheck; do extra=""; [ $t = memcheck ] && extra="--report-api-errors no"
timeout 50 $cs --tool $t $extra --error-exitcode 9 python3 .dev/p287.py > $OUT/$t-p287.log 2>&1; echo "$t p287 rc=$? ok=$(grep -c '^ok' $OUT/$t-p287.log) $(grep -E 'ERROR SUMMARY' $OUT/$t-p287.log | tail -1)"; done
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_hopper_gemm.py tests/gpu/test_gemm_tuning.py tests/gpu/test_gemm_transposed_b.py tests/gpu/test_skinny_gemm.py tests/gpu/test_models.py tests/gpu/test_two_level.py -rf > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -2 $OUT/tests.log
