#!/usr/bin/env bash
# Session 44, call 9: bench two-level at full size (64 requests, micro-batches of 8192 tokens) on the final code.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 240 python3 -m fullpipe bench two-level --out $OUT/tl > $OUT/two-level.log 2>&1; echo "two-level rc $?"
grep -A3 -E "^│ (two levels|with both)" $OUT/two-level.log | cut -c1-200 | head -12; grep -E "tokens/s|× eager" $OUT/two-level.log | cut -c1-200 | head -12
