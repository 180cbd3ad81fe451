#!/usr/bin/env bash
# Session 51, call 10: p320 (the model-layer tour) on this session's code; the changed GEMM GPU tests
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_gemm_transposed_b.py tests/gpu/test_hopper_gemm.py -k "vocabulary or current_stream or leading or cupy" > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -3 $OUT/tests.log | cut -c1-300
timeout 200 python3 .dev/p320.py > $OUT/p320.log 2>&1; echo "p320 rc $?"; tail -8 $OUT/p320.log | cut -c1-250
