python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r; export OUT=/tmp/r
python3 -m pytest -q -x tests/gpu/test_gemm_transposed_b.py -k "transposed_product" -p no:cacheprovider 2>&1 | tail -15 | tee $OUT/tests.log
python3 .dev/p396.py layers seed:410:40 2>&1 | grep -v Warning | tee $OUT/p396.log
tar -czf $OUT_SAVE/c4.tgz -C /tmp/r .
