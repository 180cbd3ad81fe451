python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r2; export OUT=/tmp/r2
timeout 300 python3 .dev/p407.py layers > $OUT/p407-layers-h200.log 2>&1; echo "p407 rc $?"
timeout 120 python3 -m pytest -q tests/gpu/test_gemm_transposed_b.py -k "transposed_product_matches" > $OUT/tests-h200.log 2>&1; echo "tests rc $?"; tail -5 $OUT/tests-h200.log
for tool in memcheck synccheck racecheck; do timeout 60 compute-sanitizer --tool $tool python3 .dev/p408_san.py > $OUT/san-$tool.log 2>&1; echo "$tool rc $?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|BAD" $OUT/san-$tool.log | head -3; done
tail -14 $OUT/p407-layers-h200.log
tar -czf $OUT_SAVE/c2.tgz -C /tmp/r2 .
