python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for b in 1x1-g8-m64-n64-s8 1x1-g8-m64-n128-s8; do
  for t in memcheck synccheck racecheck; do
    extra=""; [ $t = memcheck ] && extra="--report-api-errors no"
    timeout 120 $cs --tool $t $extra --error-exitcode 9 python3 -m fullpipe.kernels.hopper_gemm --selftest --variant persistent --build $b > $OUT/$t-$b.log 2>&1; echo "$t [$b] rc=$?"; grep -cE "^ok" $OUT/$t-$b.log; grep -E "BAD|ERROR SUMMARY|RACECHECK SUMMARY" $OUT/$t-$b.log | tail -2
  done
  timeout 120 $cs --tool memcheck --report-api-errors no --error-exitcode 9 python3 -m fullpipe.kernels.hopper_gemm --selftest --variant persistent --build $b --b-transposed > $OUT/memcheck-bT-$b.log 2>&1; echo "memcheck bT [$b] rc=$?"; grep -E "BAD|ERROR SUMMARY" $OUT/memcheck-bT-$b.log | tail -2
done
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_hopper_gemm.py tests/gpu/test_skinny_gemm.py tests/gpu/test_gemm_transposed_b.py tests/gpu/test_models.py tests/gpu/test_two_level.py -rf > $OUT/tests.log 2>&1; echo "tests rc=$?"; tail -3 $OUT/tests.log
timeout 200 python3 .dev/p268.py 2>&1 | tee $OUT/p268.log
