python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 200 python3 .dev/p255.py > $OUT/p255.log 2>&1; echo "p255 rc=$?"; grep -v "| OK |" $OUT/p255.log | grep -B3 -A10 "SUMMARY"; grep -i "vit\|mobilenet" $OUT/p255.log | cut -c1-300
