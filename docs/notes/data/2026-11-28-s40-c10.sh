python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_hopper_gemm.py tests/gpu/test_skinny_gemm.py tests/gpu/test_gemm_transposed_b.py tests/gpu/test_models.py tests/gpu/test_two_level.py -rf > $OUT/tests.log 2>&1; echo "tests rc=$?"; tail -3 $OUT/tests.log
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
run() {  # tool label args...
  t=$1; lab=$2; shift 2
  extra=""; [ $t = memcheck ] && extra="--report-api-errors no"
  timeout 100 $cs --tool $t $extra --error-exitcode 9 python3 -m fullpipe.kernels.hopper_gemm --selftest --variant persistent "$@" > $OUT/$t-$lab.log 2>&1
  echo "$t [$lab] rc=$? ok=$(grep -cE '^ok' $OUT/$t-$lab.log) $(grep -E 'BAD|ERROR SUMMARY|RACECHECK SUMMARY' $OUT/$t-$lab.log | tail -2 | tr '\n' ' ')"
}
run memcheck default
run synccheck default
run racecheck default
run memcheck bT --b-transposed
run racecheck bT --b-transposed
run memcheck 2x2 --build 2x2-g8
run memcheck m64n64 --build 1x1-g8-m64-n64-s8
