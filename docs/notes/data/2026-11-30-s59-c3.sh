python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r3; export OUT=/tmp/r3
git log --oneline | head -1
for tool in memcheck synccheck racecheck; do
  compute-sanitizer --tool $tool python3 .dev/p402_san.py > $OUT/san-$tool.log 2>&1; echo "$tool rc $?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Error:" $OUT/san-$tool.log | sort | uniq -c | head -5
done
grep -E "^[0-9]" $OUT/san-memcheck.log
timeout 300 python3 -m pytest -q tests/gpu/test_gemm_transposed_b.py tests/gpu/test_hopper_gemm.py tests/gpu/test_gemm_tuning.py tests/gpu/test_skinny_gemm.py -p no:cacheprovider 2>&1 | tail -4 | tee $OUT/tests1.log
timeout 280 python3 -m pytest -q tests/gpu/test_two_level.py tests/gpu/test_models.py tests/gpu/test_pipelined_prefill.py tests/gpu/test_kernels.py tests/gpu/test_decode.py -p no:cacheprovider 2>&1 | tail -4 | tee $OUT/tests2.log
tar -czf $OUT_SAVE/c3.tgz -C /tmp/r3 .
