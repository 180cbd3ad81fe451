python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r6; export OUT=/tmp/r6
timeout 120 python3 .dev/p411_host.py > $OUT/p411-h200.log 2>&1; echo "p411 rc $?"
timeout 250 python3 .dev/p410.py seed:407:24 > $OUT/p410-seed407-h200.log 2>&1; echo "p410 rc $?"
head -6 $OUT/p411-h200.log; tail -3 $OUT/p410-seed407-h200.log
tar -czf $OUT_SAVE/c6.tgz -C /tmp/r6 .
