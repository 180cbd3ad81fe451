# Session 58, call 9: the new gemm-prefill experiment, full size, through the CLI
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r9; export OUT=/tmp/r9
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 400 python3 -m fullpipe bench gemm-prefill > $OUT/bench.log 2>&1; echo "bench rc $?"
tail -40 $OUT/bench.log | grep -v "━"
cp fullpipe-out/gemm-prefill.json $OUT/ 2>/dev/null; ls fullpipe-out | head
tar -czf $OUT_SAVE/c9.tgz -C /tmp/r9 .
