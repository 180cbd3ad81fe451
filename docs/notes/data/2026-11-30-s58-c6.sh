python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r; export OUT=/tmp/r
git log --oneline | head -1
for tool in memcheck synccheck racecheck; do
  compute-sanitizer --tool $tool python3 .dev/p397_san.py > $OUT/san-$tool.log 2>&1; echo "$tool rc $?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Error:" $OUT/san-$tool.log | sort | uniq -c | head -5
done
grep -E "^[0-9]" $OUT/san-memcheck.log
P398_OLD=1 python3 .dev/p398_model.py 100,200,300,384,512,768,1000 2>&1 | grep -v Warning | tee $OUT/p398-old.log
timeout 420 python3 -m pytest -q tests/gpu/test_gemm_transposed_b.py tests/gpu/test_hopper_gemm.py tests/gpu/test_gemm_tuning.py tests/gpu/test_skinny_gemm.py -p no:cacheprovider 2>&1 | tail -8 | tee $OUT/tests.log
tar -czf $OUT_SAVE/c6.tgz -C /tmp/r .
