python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 200 python3 .dev/p263.py 2>&1 | tee $OUT/p263.log | tail -60
echo ======= eager
timeout 200 python3 .dev/p263.py eager 2>&1 | tee $OUT/p263e.log | grep -E "^run|naive"
