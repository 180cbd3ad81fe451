#!/usr/bin/env bash
# Session 56, call 4: sanitizers on the transposed product (fixed script), p382 seed 382 (80 products); results in one tar
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
mkdir -p /tmp/r; nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv,noheader
for tool in memcheck synccheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool python3 .dev/p380_san.py > /tmp/r/san-$tool.log 2>&1; echo "$tool rc $?"; grep -v "cuGetProcAddress\|^=========     \|^========= $" /tmp/r/san-$tool.log | tail -8
done
grep -c "cuGetProcAddress" /tmp/r/san-memcheck.log; grep "Invalid\|out of bounds\|Address" /tmp/r/san-memcheck.log | head -3
OUT_SAVE=$OUT; export OUT=/tmp/r
timeout 300 python3 .dev/p382.py 382 80 > /tmp/r/p382-382.log 2>&1; echo "p382 rc $?"; grep -E "SUMMARY|WRONG|Error|total" /tmp/r/p382-382.log
tar -czf $OUT_SAVE/c4.tgz -C /tmp/r .
