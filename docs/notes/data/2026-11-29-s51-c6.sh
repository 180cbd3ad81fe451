#!/usr/bin/env bash
# Session 51, call 6: host time per small gemm call (p321, session 50's probe; out=None rows added), p333 again,
# the new GPU tests (no rows through the pipeline; the fast current stream; heads of any vocabulary)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 100 python3 .dev/p321.py > $OUT/p321.log 2>&1; echo "p321 rc $?"; grep " us" $OUT/p321.log | head -30
timeout 120 python3 .dev/p333.py > $OUT/p333.log 2>&1; echo "p333 rc $?"; grep RESULT $OUT/p333.log
timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_pipeline_torch.py tests/gpu/test_hopper_gemm.py -k "no_rows or current_stream or errors_name" > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -3 $OUT/tests.log
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_gemm_transposed_b.py -k "vocabulary" > $OUT/tests2.log 2>&1; echo "tests2 rc $?"; tail -3 $OUT/tests2.log
