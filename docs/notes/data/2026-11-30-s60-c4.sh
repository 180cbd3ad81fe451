python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r4; export OUT=/tmp/r4
timeout 280 python3 .dev/p407.py layers > $OUT/p407-layers-h200.log 2>&1; echo "p407 rc $?"
timeout 250 python3 .dev/p407.py seed:406:40 > $OUT/p407-seed406-h200.log 2>&1; echo "p407 rc $?"
tail -12 $OUT/p407-layers-h200.log; tail -12 $OUT/p407-seed406-h200.log
tar -czf $OUT_SAVE/c4.tgz -C /tmp/r4 .
