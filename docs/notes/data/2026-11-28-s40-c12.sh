python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 100 python3 .dev/p279.py 2>&1 | tee $OUT/p279.log
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_skinny_gemm.py tests/gpu/test_gemm_transposed_b.py tests/gpu/test_hopper_gemm.py -k "skinny or rows_past or edges or transposed" -rf 2>&1 | tail -3
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for t in memcheck racecheck synccheck; do extra=""; [ $t = memcheck ] && extra="--report-api-errors no"
timeout 90 $cs --tool $t $extra --error-exitcode 9 python3 -m fullpipe.kernels.skinny_gemm --selftest > $OUT/$t-skinny.log 2>&1; echo "$t skinny rc=$? $(grep -E 'BAD|ERROR SUMMARY|RACECHECK SUMMARY' $OUT/$t-skinny.log | tail -1)"; done
