python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r5; export OUT=/tmp/r5
timeout 150 python3 -m pytest -q tests/gpu/test_gemm_tuning.py > $OUT/tests-h200.log 2>&1; echo "tests rc $?"; tail -3 $OUT/tests-h200.log
timeout 200 python3 .dev/p410.py found > $OUT/p410-found-h200.log 2>&1; echo "p410 rc $?"
timeout 200 python3 .dev/u7.py > $OUT/u7-h200.log 2>&1; echo "u7 rc $?"
tail -15 $OUT/p410-found-h200.log; tail -9 $OUT/u7-h200.log
tar -czf $OUT_SAVE/c5.tgz -C /tmp/r5 .
