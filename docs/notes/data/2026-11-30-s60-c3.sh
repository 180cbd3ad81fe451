python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r3; export OUT=/tmp/r3
timeout 250 python3 .dev/p409_compile.py > $OUT/p409-h200.log 2>&1; echo "p409 rc $?"; grep -c FAIL $OUT/p409-h200.log; tail -3 $OUT/p409-h200.log
tar -czf $OUT_SAVE/c3.tgz -C /tmp/r3 .
