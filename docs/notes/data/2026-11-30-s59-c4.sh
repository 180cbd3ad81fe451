python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r4; export OUT=/tmp/r4
python3 .dev/p401.py seed:403:40 2>&1 | grep -v Warning > $OUT/p401-403.log; grep SUMMARY $OUT/p401-403.log; grep -c BAD $OUT/p401-403.log
timeout 200 python3 -m pytest -q tests/gpu/test_gemm_transposed_b.py -k "192 or prefill" -p no:cacheprovider 2>&1 | tail -2 | tee $OUT/tests.log
tar -czf $OUT_SAVE/c4.tgz -C /tmp/r4 .
