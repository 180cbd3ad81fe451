python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for b in "" "--build 1x1-g8-n64-s8"; do
  for t in memcheck synccheck racecheck; do
    extra=""; [ $t = memcheck ] && extra="--report-api-errors no"
    timeout 120 $cs --tool $t $extra --error-exitcode 9 python3 -m fullpipe.kernels.hopper_gemm --selftest --variant persistent $b > $OUT/$t.log 2>&1; echo "$t [$b] rc=$?"; grep -E "chain|BAD|ERROR SUMMARY|RACECHECK SUMMARY" $OUT/$t.log | tail -3
  done
done
timeout 400 python3 .dev/p264.py 2>&1 | tee $OUT/p264.log
