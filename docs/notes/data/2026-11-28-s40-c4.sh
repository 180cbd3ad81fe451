python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 120 python3 -m fullpipe.kernels.hopper_gemm --selftest --variant persistent 2>&1 | tail -12
timeout 420 python3 .dev/p274.py 2>&1 | tee $OUT/p274.log
