python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_hopper_gemm.py tests/gpu/test_skinny_gemm.py tests/gpu/test_gemm_transposed_b.py tests/gpu/test_models.py tests/gpu/test_two_level.py -rf > $OUT/tests.log 2>&1; echo "tests rc=$?"; tail -3 $OUT/tests.log
for b in "--build 1x1-g8-n64-s8" "--build 1x1-g8-n64-s8 --b-transposed"; do
  timeout 90 $cs --tool memcheck --report-api-errors no --error-exitcode 9 python3 -m fullpipe.kernels.hopper_gemm --selftest --variant persistent $b > $OUT/memcheck.log 2>&1; echo "memcheck $b rc=$?"; tail -1 $OUT/memcheck.log
  timeout 90 $cs --tool synccheck --error-exitcode 9 python3 -m fullpipe.kernels.hopper_gemm --selftest --variant persistent $b > $OUT/synccheck.log 2>&1; echo "synccheck $b rc=$?"; tail -1 $OUT/synccheck.log
done
timeout 200 python3 .dev/p249.py 2>&1 | tee $OUT/p249.log | tail -30
