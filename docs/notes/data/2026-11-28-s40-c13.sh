python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 100 python3 .dev/p279.py 2>&1 | tee $OUT/p279b.log
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_skinny_gemm.py tests/gpu/test_gemm_transposed_b.py tests/gpu/test_hopper_gemm.py -k "skinny or rows_past" -rf 2>&1 | tail -3
