python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r1; export OUT=/tmp/r1
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader
python3 .dev/p400.py edges 2>&1 | grep -v Warning | tee $OUT/p400-edges.log | grep -c ok
grep BAD $OUT/p400-edges.log
python3 .dev/p400.py layers seed:401:40 2>&1 | grep -v Warning > $OUT/p400.log; tail -3 $OUT/p400.log
timeout 300 python3 -m pytest -q tests/gpu/test_gemm_transposed_b.py tests/gpu/test_hopper_gemm.py -p no:cacheprovider 2>&1 | tail -4 | tee $OUT/tests.log
tar -czf $OUT_SAVE/c1.tgz -C /tmp/r1 .
