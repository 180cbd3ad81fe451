python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 240 python3 -m fullpipe.cli bench workloads --out $OUT/wl > $OUT/workloads.log 2>&1; echo "workloads rc $?"
cp $OUT/wl/workloads.json $OUT/ 2>/dev/null || cp $OUT/wl/*.json $OUT/workloads.json; rm -rf $OUT/wl
python3 docs/notes/data/2026-11-28-s33-wlsum.py $OUT/workloads.json
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_threads.py > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -1 $OUT/tests.log
