python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 540 python3 .dev/p255.py > $OUT/p255.log 2>&1; echo "rc=$?"
grep -v "| OK |" $OUT/p255.log | tail -60
