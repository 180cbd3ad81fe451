python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gemm_tuning.py -rf -x 2>&1 | tail -15
timeout 360 python3 .dev/p282.py 2>&1 | tee $OUT/p282.log
