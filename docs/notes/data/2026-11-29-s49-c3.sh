#!/usr/bin/env bash
# Session 49, call 3: p310 (below one wave: every tile dealt out against whole tiles, fresh products); the GEMM GPU
# tests on the new one-wave rule; memcheck of the persistent selftest; bench gemm-hopper --quick.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 200 python3 .dev/p310.py > $OUT/p310.log 2>&1; echo "p310 rc $?"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_hopper_gemm.py tests/gpu/test_gemm_tuning.py tests/gpu/test_gemm_transposed_b.py -rf > $OUT/tests-gemm.log 2>&1; echo "gemm tests rc $?"; tail -2 $OUT/tests-gemm.log
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
timeout 60 $cs --tool memcheck --report-api-errors no --error-exitcode 9 python3 -m fullpipe.kernels.hopper_gemm --selftest --variant persistent > $OUT/memcheck.log 2>&1; echo "memcheck rc=$? ok=$(grep -c '^ok' $OUT/memcheck.log) bad=$(grep -c '^BAD' $OUT/memcheck.log) $(grep -E 'ERROR SUMMARY' $OUT/memcheck.log | tail -1)"
timeout 120 python3 -m fullpipe bench gemm-hopper --quick > $OUT/bench-gemm-hopper.log 2>&1; echo "bench rc $?"; tail -25 $OUT/bench-gemm-hopper.log | cut -c1-200
