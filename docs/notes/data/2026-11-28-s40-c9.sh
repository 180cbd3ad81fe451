python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 120 python3 -m fullpipe.kernels.hopper_gemm --selftest --variant persistent 2>&1 | grep -c "^ok"
timeout 120 python3 -m fullpipe.kernels.hopper_gemm --selftest --variant persistent --b-transposed 2>&1 | grep -c "^ok"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_hopper_gemm.py -k "edges or dependent or every_persistent" 2>&1 | tail -2
timeout 420 python3 .dev/p277.py 2>&1 | tee $OUT/p277.log
