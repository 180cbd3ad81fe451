python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 240 python3 .dev/p270.py $OUT/p270.json > $OUT/p270.log 2>&1; echo "rc=$?"; tail -3 $OUT/p270.log
