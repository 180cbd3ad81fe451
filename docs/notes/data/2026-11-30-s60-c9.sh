python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r9; export OUT=/tmp/r9
timeout 60 python3 -m pytest -q tests/test_nvrtc_worker.py > $OUT/tests-worker-h200.log 2>&1; echo "worker tests rc $?"; tail -2 $OUT/tests-worker-h200.log
timeout 470 python3 -m pytest -q tests/gpu/test_gemm_transposed_b.py tests/gpu/test_gemm_tuning.py tests/gpu/test_skinny_gemm.py tests/gpu/test_hopper_gemm.py > $OUT/tests-h200.log 2>&1; echo "tests rc $?"; tail -6 $OUT/tests-h200.log
ps aux | grep -c "[f]ullpipe_nvrtc_worker\|[s]pec_from_file_location" 
tar -czf $OUT_SAVE/c9.tgz -C /tmp/r9 .
