# Session 58, call 10: gemm-prefill --quick (threads compile its builds), then `fullpipe report --quick` through its GPU test (3-minute target)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r10; export OUT=/tmp/r10
export FULLPIPE_CACHE_DIR=/tmp/cubin-c10a
S=$SECONDS; timeout 200 python3 -m fullpipe bench gemm-prefill --quick > $OUT/bench-quick.log 2>&1; echo "bench rc $? wall $((SECONDS-S)) s"
grep -E "wall|supported|×" $OUT/bench-quick.log | head -12
export FULLPIPE_CACHE_DIR=/tmp/cubin-c10b
timeout 440 python3 -m pytest -q tests/gpu/test_report.py -p no:cacheprovider 2>&1 | tail -6 | tee $OUT/report-test.log
cp test-artifacts/gpu-report/console.txt $OUT/report-console.txt 2>/dev/null
grep -E "gemm-prefill|report:" $OUT/report-console.txt | head
tar -czf $OUT_SAVE/c10.tgz -C /tmp/r10 .
