#!/usr/bin/env bash
# Session 52, call 9: final GEMM code (kept stream-K workspace, split floor, NVRTC's source held): the GEMM GPU
# tests, the model tests, synccheck on the persistent rung, and p340 again (small-N products x cuBLAS).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_hopper_gemm.py tests/gpu/test_skinny_gemm.py tests/gpu/test_gemm_transposed_b.py tests/gpu/test_gemm_tuning.py > $OUT/gemm-tests.log 2>&1; echo "gemm tests rc $?"; tail -1 $OUT/gemm-tests.log; grep -E "^(FAILED|ERROR)|Fatal" $OUT/gemm-tests.log | head
timeout 100 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_models.py tests/gpu/test_decode.py tests/gpu/test_two_level.py > $OUT/model-tests.log 2>&1; echo "model tests rc $?"; tail -1 $OUT/model-tests.log
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
timeout 90 $cs --tool memcheck --report-api-errors no --error-exitcode 9 python3 -m fullpipe.kernels.hopper_gemm --selftest --variant persistent > $OUT/memcheck.log 2>&1; echo "memcheck rc $?"; grep -E "ERROR SUMMARY|BAD" $OUT/memcheck.log | head -3
P340_N=12 timeout 120 python3 .dev/p340.py > $OUT/p340.log 2>&1; echo "p340 rc $?"; grep -a -v "^      " $OUT/p340.log | tail -24
