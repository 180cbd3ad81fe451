python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r8; export OUT=/tmp/r8
timeout 260 python3 -m pytest -q tests/gpu/test_gemm_transposed_b.py tests/gpu/test_hopper_gemm.py tests/gpu/test_gemm_tuning.py tests/gpu/test_skinny_gemm.py -p no:cacheprovider 2>&1 | tail -3 | tee $OUT/tests1.log
timeout 200 python3 -m pytest -q tests/gpu/test_two_level.py tests/gpu/test_models.py tests/gpu/test_pipelined_prefill.py tests/gpu/test_kernels.py tests/gpu/test_decode.py -p no:cacheprovider 2>&1 | tail -3 | tee $OUT/tests2.log
tar -czf $OUT_SAVE/c8.tgz -C /tmp/r8 .
