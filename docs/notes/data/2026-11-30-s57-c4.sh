#!/usr/bin/env bash
# Session 57, call 4: sanitizers on the multi-tile transposed product; the r64 band hold-out (seed 397); a user's
# Llama-3-8B projection stack through gemm() at 100-1000 tokens; CPU-side tests of hopper gemm on the GPU
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r; export OUT=/tmp/r
python3 .dev/p390_san.py > /tmp/r/san-plain.log 2>&1; echo "plain rc $?"; cat /tmp/r/san-plain.log
for tool in memcheck synccheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool python3 .dev/p390_san.py > /tmp/r/san-$tool.log 2>&1; echo "$tool rc $?"; grep -v "cuGetProcAddress\|^=========     \|^========= $" /tmp/r/san-$tool.log | tail -4
done
grep -c "cuGetProcAddress" /tmp/r/san-memcheck.log; grep "Invalid\|out of bounds\|Address" /tmp/r/san-memcheck.log | head -3
timeout 100 python3 .dev/p389.py 397 30 129 240 4224 6400 4096 5760 > $OUT/p389-397.log 2>&1; echo "397 rc $?"; grep -E "SUMMARY M=129|WRONG" $OUT/p389-397.log
timeout 150 python3 .dev/p391_model.py 100,200,300,384,500,777,1000 > $OUT/p391.log 2>&1; echo "p391 rc $?"; cat $OUT/p391.log | tail -8
tar -czf $OUT_SAVE/c4.tgz -C /tmp/r .
