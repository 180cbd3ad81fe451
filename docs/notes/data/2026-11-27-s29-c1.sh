#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv,noheader
nproc
timeout 200 python3 -m pytest -q -p no:cacheprovider --timeout 120 tests/gpu/test_hopper_gemm.py tests/gpu/test_skinny_gemm.py tests/gpu/test_gemm_transposed_b.py > $OUT/gemm-tests.log 2>&1; echo "gemm tests rc $?"; tail -2 $OUT/gemm-tests.log
timeout 200 python3 .dev/p190.py > $OUT/p190.log 2>&1; echo "p190 rc $?"
cat $OUT/p190.log | grep -v "^ *[0-9]* *[0-9.]* *[0-9.]* *[0-9.]* *[0-9.]* .*lib/python" | head -150
