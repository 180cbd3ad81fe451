python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_hopper_gemm.py -k "dependent or stream_k or persistent" -rf > $OUT/tests.log 2>&1; echo "tests rc=$?"; tail -2 $OUT/tests.log
timeout 60 python3 -m fullpipe.kernels.hopper_gemm --selftest --variant persistent --build 1x1-g8-m64-n64-s8 | tail -2
