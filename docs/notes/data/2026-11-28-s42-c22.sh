python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gemm_tuning.py tests/test_gemm_tuning.py -rf 2>&1 | tail -3
FULLPIPE_GEMM_TUNE=1 timeout 150 python3 .dev/p255.py > $OUT/p255-tune.log 2>&1; echo "p255 under FULLPIPE_GEMM_TUNE=1 rc=$?"; head -1 $OUT/p255-tune.log; grep -v "| OK |" $OUT/p255-tune.log | grep SCENARIO | head
timeout 60 python3 .dev/p283.py --host 2>&1 | tail -2
