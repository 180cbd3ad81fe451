python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r6; export OUT=/tmp/r6
timeout 420 python3 .dev/p404.py layers seed:404:48 2>&1 | grep -v Warning > $OUT/p404.log; tail -2 $OUT/p404.log; grep -c BAD $OUT/p404.log
tar -czf $OUT_SAVE/c6.tgz -C /tmp/r6 .
