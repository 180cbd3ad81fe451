python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r10; export OUT=/tmp/r10
timeout 60 python3 -m pytest -q tests/test_nvrtc_worker.py > $OUT/tests-worker-h200.log 2>&1; echo "worker tests rc $?"; tail -1 $OUT/tests-worker-h200.log
timeout 280 python3 -m fullpipe bench workloads --quick > $OUT/bench-workloads.log 2>&1; echo "bench rc $?"; cp fullpipe-out/workloads.json $OUT/ 2>/dev/null
timeout 200 python3 .dev/u7.py > $OUT/u7-h200.log 2>&1; echo "u7 rc $?"
tail -25 $OUT/bench-workloads.log; tail -7 $OUT/u7-h200.log
tar -czf $OUT_SAVE/c10.tgz -C /tmp/r10 .
