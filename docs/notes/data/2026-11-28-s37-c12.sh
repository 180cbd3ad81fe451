python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
timeout 200 python3 .dev/p252.py 2>&1 | tee $OUT/p252.log
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_hopper_gemm.py -k "every_persistent_build" -rf > $OUT/tests.log 2>&1; echo "tests rc=$?"; tail -3 $OUT/tests.log
for b in "--build 1x1-g8-m64ks-n128-s6" "--build 1x1-g8-m64ks-n128-s6 --b-transposed"; do
  timeout 90 $cs --tool memcheck --report-api-errors no --error-exitcode 9 python3 -m fullpipe.kernels.hopper_gemm --selftest --variant persistent $b > $OUT/memcheck.log 2>&1; echo "memcheck $b rc=$?"; tail -1 $OUT/memcheck.log
  timeout 90 $cs --tool synccheck --error-exitcode 9 python3 -m fullpipe.kernels.hopper_gemm --selftest --variant persistent $b > $OUT/synccheck.log 2>&1; echo "synccheck $b rc=$?"; tail -1 $OUT/synccheck.log
  timeout 120 $cs --tool racecheck --error-exitcode 9 python3 -m fullpipe.kernels.hopper_gemm --selftest --variant persistent $b > $OUT/racecheck.log 2>&1; echo "racecheck $b rc=$?"; tail -1 $OUT/racecheck.log
done
