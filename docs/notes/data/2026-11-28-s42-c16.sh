python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
run() {  # tool label module args...
  t=$1; lab=$2; mod=$3; shift 3
  extra=""; [ $t = memcheck ] && extra="--report-api-errors no"
  timeout 100 $cs --tool $t $extra --error-exitcode 9 python3 -m fullpipe.kernels.$mod --selftest "$@" > $OUT/$t-$lab.log 2>&1
  echo "$t [$lab] rc=$? ok=$(grep -cE '^ok' $OUT/$t-$lab.log) bad=$(grep -cE '^BAD' $OUT/$t-$lab.log) $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/$t-$lab.log | tail -2 | tr '\n' ' ')"
}
run memcheck skinny skinny_gemm
run synccheck skinny skinny_gemm
run racecheck skinny skinny_gemm
run memcheck skinny-bT skinny_gemm --b-transposed
run memcheck persistent hopper_gemm --variant persistent
run synccheck persistent hopper_gemm --variant persistent
timeout 200 python3 .dev/p255.py > $OUT/p255.log 2>&1; echo "p255 rc=$?"; tail -8 $OUT/p255.log
