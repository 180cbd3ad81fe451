#!/usr/bin/env bash
# Session 52, call 7: stream-K's kept workspace (self-zeroing kernel) and the split floor: the GEMM GPU tests,
# the model tests that run the GEMM, compute-sanitizer on the persistent rung, eager host time (p344 control, p341).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 240 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_hopper_gemm.py tests/gpu/test_skinny_gemm.py tests/gpu/test_gemm_transposed_b.py tests/gpu/test_gemm_tuning.py > $OUT/gemm-tests.log 2>&1; echo "gemm tests rc $?"; tail -2 $OUT/gemm-tests.log; grep -E "^(FAILED|ERROR)" $OUT/gemm-tests.log | head
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck synccheck; do
  extra=""; [ $tool = memcheck ] && extra="--report-api-errors no"
  timeout 120 $cs --tool $tool $extra --error-exitcode 9 python3 -m fullpipe.kernels.hopper_gemm --selftest --variant persistent > $OUT/$tool.log 2>&1; echo "$tool rc $?"; grep -E "ERROR SUMMARY|BAD" $OUT/$tool.log | head -3
done
timeout 60 $cs --tool memcheck --report-api-errors no --error-exitcode 9 python3 -m fullpipe.kernels.hopper_gemm --selftest --variant persistent --b-transposed > $OUT/memcheck-wt.log 2>&1; echo "memcheck w.T rc $?"; grep -E "ERROR SUMMARY|BAD" $OUT/memcheck-wt.log | head -3
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_models.py tests/gpu/test_decode.py tests/gpu/test_two_level.py tests/gpu/test_pipelined_prefill.py > $OUT/model-tests.log 2>&1; echo "model tests rc $?"; tail -2 $OUT/model-tests.log
P344_N=0 timeout 100 python3 .dev/p344.py > $OUT/p344.log 2>&1; echo "p344 rc $?"; grep RESULT $OUT/p344.log
timeout 60 python3 .dev/p341.py > $OUT/p341.log 2>&1; echo "p341 rc $?"; grep RESULT $OUT/p341.log
