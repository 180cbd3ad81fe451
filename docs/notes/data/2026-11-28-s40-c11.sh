python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 100 python3 .dev/p278.py 2>&1 | tee $OUT/p278.log
timeout 240 python3 .dev/p255.py > $OUT/p255.log 2>&1; echo "p255 rc=$?"; grep -v "| OK |" $OUT/p255.log | grep -B3 -A10 "SUMMARY" | head -30
