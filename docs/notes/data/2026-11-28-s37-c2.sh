python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
timeout 300 python3 .dev/p246.py 2>&1 | tee $OUT/p246.log
for t in memcheck synccheck; do
  timeout 60 $cs --tool $t --error-exitcode 9 python3 -m fullpipe.kernels.hopper_gemm --selftest --variant persistent --build 1x1-g8-n64-s8 > $OUT/$t.log 2>&1; echo "$t rc=$?"; tail -2 $OUT/$t.log
  timeout 60 $cs --tool $t --error-exitcode 9 python3 -m fullpipe.kernels.hopper_gemm --selftest --variant persistent --build 1x1-g8-n64-s8 --b-transposed > $OUT/$t-bT.log 2>&1; echo "$t bT rc=$?"; tail -2 $OUT/$t-bT.log
done
