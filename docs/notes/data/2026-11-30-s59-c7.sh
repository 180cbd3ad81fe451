python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r7; export OUT=/tmp/r7
python3 .dev/p405.py seed:405:60 2>&1 | grep -v Warning > $OUT/p405.log; grep SUMMARY $OUT/p405.log; grep -c BAD $OUT/p405.log
tar -czf $OUT_SAVE/c7.tgz -C /tmp/r7 .
