python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r2; export OUT=/tmp/r2
python3 .dev/p400.py edges 2>&1 | grep -v Warning > $OUT/p400-edges.log; grep -c ok $OUT/p400-edges.log; grep -E "BAD|Error" $OUT/p400-edges.log
python3 .dev/p401.py seed:402:40 2>&1 | grep -v Warning > $OUT/p401.log; grep SUMMARY $OUT/p401.log; grep BAD $OUT/p401.log
timeout 240 python3 -m pytest -q tests/gpu/test_gemm_transposed_b.py -k "192" -p no:cacheprovider 2>&1 | tail -3 | tee $OUT/tests.log
timeout 300 python3 -m fullpipe bench gemm-prefill > $OUT/gemm-prefill.log 2>&1; echo "bench rc $?"; tail -30 $OUT/gemm-prefill.log | grep -v "━"; cp fullpipe-out/gemm-prefill.json $OUT/ 2>/dev/null
tar -czf $OUT_SAVE/c2.tgz -C /tmp/r2 .
