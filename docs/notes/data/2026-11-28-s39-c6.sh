python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_hopper_gemm.py -k "stream_k" -rf > $OUT/tests.log 2>&1; echo "tests rc=$?"; tail -3 $OUT/tests.log
timeout 300 python3 .dev/p268.py $OUT/p268.json 2>&1 | tee $OUT/p268.log
