python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r7; export OUT=/tmp/r7
timeout 330 python3 -m pytest -q tests/gpu/test_two_level.py tests/gpu/test_models.py tests/gpu/test_pipelined_prefill.py tests/gpu/test_kernels.py tests/gpu/test_decode.py -p no:cacheprovider 2>&1 | tail -8 | tee $OUT/tests.log
timeout 230 python3 -m fullpipe.experiments.two_level --quick --json $OUT/two_level.json 2>&1 | grep -v Warning | tail -25 | tee $OUT/two_level.log
tar -czf $OUT_SAVE/c7.tgz -C /tmp/r7 .
