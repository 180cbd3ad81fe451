#!/usr/bin/env bash
# Session 52, call 2: the GPU tests the whole-suite call left unrun (its 320 s ran out at 92 %), then p340.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 240 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_runtime.py tests/gpu/test_skinny_gemm.py tests/gpu/test_stages.py tests/gpu/test_threads.py tests/gpu/test_trace.py tests/gpu/test_two_level.py tests/gpu/test_role_stamps.py tests/gpu/test_pool.py tests/gpu/test_pipelined_prefill.py > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -3 $OUT/tests.log
timeout 200 python3 .dev/p340.py > $OUT/p340.log 2>&1; echo "p340 rc $?"
grep -v "^      " $OUT/p340.log | tail -30
