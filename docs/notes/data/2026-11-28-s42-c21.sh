python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gemm_tuning.py -rf --durations=3 2>&1 | tail -6
timeout 60 python3 -m fullpipe tune-gemm 1865x2208x7064 197x6288x5448 2>&1 | tail -8
