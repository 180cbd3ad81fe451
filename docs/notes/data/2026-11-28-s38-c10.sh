python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 120 python3 .dev/p263.py 2>&1 > $OUT/p263.log; grep -E "^run|naive|chunk:" $OUT/p263.log
timeout 120 python3 .dev/p263.py 2>&1 > $OUT/p263b.log; grep -E "^run|naive" $OUT/p263b.log
timeout 200 python3 .dev/p255.py > $OUT/p255.log 2>&1; echo "p255 rc=$?"; grep -v "| OK |" $OUT/p255.log | grep -B2 -A12 "SUMMARY"
timeout 400 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_pipeline_torch.py tests/gpu/test_pipeline_records.py tests/gpu/test_threads.py -rf > $OUT/tests.log 2>&1; echo "tests rc=$?"; tail -3 $OUT/tests.log
