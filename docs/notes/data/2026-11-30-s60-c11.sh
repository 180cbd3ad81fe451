python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r11; export OUT=/tmp/r11
timeout 60 python3 -m pytest -q tests/test_nvrtc_worker.py > $OUT/tests-worker-h200.log 2>&1; echo "worker tests rc $?"; tail -1 $OUT/tests-worker-h200.log
timeout 420 python3 -m pytest -q tests/gpu/test_kernels.py tests/gpu/test_kernels_level2_extra.py tests/gpu/test_flash_attention.py tests/gpu/test_flash_attention_hopper.py tests/gpu/test_decode_attention.py tests/gpu/test_elementwise_kernels.py tests/gpu/test_threads.py > $OUT/tests-h200.log 2>&1; echo "tests rc $?"; tail -4 $OUT/tests-h200.log
ps aux | grep -c "[s]pec_from_file_location"
tar -czf $OUT_SAVE/c11.tgz -C /tmp/r11 .
