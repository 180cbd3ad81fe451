python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r9; export OUT=/tmp/r9
timeout 200 python3 -m pytest -q tests/gpu/test_hopper_gemm.py -p no:cacheprovider 2>&1 | tail -15 | tee $OUT/tests.log
tar -czf $OUT_SAVE/c9.tgz -C /tmp/r9 .
