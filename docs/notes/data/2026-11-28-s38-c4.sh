python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
python3 .dev/p259.py 2>&1 | tee $OUT/p259.log
python3 -m pytest -q -x tests/gpu/test_hopper_gemm.py -k "stream_k" -p no:cacheprovider 2>&1 | tail -4 | tee $OUT/tests.log
