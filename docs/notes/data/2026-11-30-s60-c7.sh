python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r7; export OUT=/tmp/r7
timeout 120 python3 .dev/p412_host.py > $OUT/p412-h200.log 2>&1; echo "p412 rc $?"
cat $OUT/p412-h200.log | tail -22
tar -czf $OUT_SAVE/c7.tgz -C /tmp/r7 .
