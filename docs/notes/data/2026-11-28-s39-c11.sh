python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_skinny_gemm.py tests/gpu/test_gemm_transposed_b.py tests/gpu/test_models.py tests/gpu/test_two_level.py -rf > $OUT/tests.log 2>&1; echo "tests rc=$?"; tail -3 $OUT/tests.log
