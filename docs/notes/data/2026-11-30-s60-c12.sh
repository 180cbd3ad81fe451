python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r12; export OUT=/tmp/r12
timeout 90 python3 -m pytest -q -W error::ResourceWarning tests/test_nvrtc_worker.py > $OUT/tests-worker-h200.log 2>&1; echo "worker tests rc $?"; tail -2 $OUT/tests-worker-h200.log
timeout 300 python3 -m pytest -q tests/gpu/test_gemm_tuning.py tests/gpu/test_gemm_transposed_b.py -k "tuning or transposed_product_matches or 192" > $OUT/tests-h200.log 2>&1; echo "tests rc $?"; tail -3 $OUT/tests-h200.log
ps aux | grep -c "[s]pec_from_file_location"
tar -czf $OUT_SAVE/c12.tgz -C /tmp/r12 .
