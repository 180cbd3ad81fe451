#!/usr/bin/env bash
# Session 51, call 5: the GEMM GPU tests again (call 4's run died in NVRTC: a segfault compiling a build)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 500 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_gemm_transposed_b.py tests/gpu/test_hopper_gemm.py tests/gpu/test_skinny_gemm.py tests/gpu/test_gemm_tuning.py > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "passed|failed|Fatal|File \"/work" $OUT/tests.log | head -20 | cut -c1-250
