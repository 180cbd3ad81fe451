python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 150 python3 .dev/p351.py 2>&1 | tee $OUT/p351.log
timeout 150 python3 .dev/p351.py 2>&1 | tee $OUT/p351b.log
