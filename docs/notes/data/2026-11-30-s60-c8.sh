python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r8; export OUT=/tmp/r8
timeout 60 python3 .dev/p412_host.py > $OUT/p412-h200.log 2>&1; echo "p412 rc $?"
timeout 420 python3 -m pytest -q tests/gpu/test_gemm_transposed_b.py tests/gpu/test_gemm_tuning.py tests/gpu/test_skinny_gemm.py > $OUT/tests-h200.log 2>&1; echo "tests rc $?"; tail -4 $OUT/tests-h200.log
head -6 $OUT/p412-h200.log
tar -czf $OUT_SAVE/c8.tgz -C /tmp/r8 .
