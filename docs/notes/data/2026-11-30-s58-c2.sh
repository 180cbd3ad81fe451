python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r; export OUT=/tmp/r
python3 .dev/p394.py dict varlen 2>&1 | grep -v Warning | tee $OUT/p394.log | grep "=="
tar -czf $OUT_SAVE/c2.tgz -C /tmp/r .
