#!/usr/bin/env bash
# Session 51, call 1: p330 (a new user's tour, third round), p306 + p304 (the variable-length list's set-up, baseline)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader; nproc
timeout 300 python3 .dev/p330.py > $OUT/p330.log 2>&1; echo "p330 rc $?"
timeout 100 python3 .dev/p306.py > $OUT/p306.log 2>&1; echo "p306 rc $?"
timeout 100 python3 .dev/p304.py > $OUT/p304.log 2>&1; echo "p304 rc $?"
grep -E "ms/run" $OUT/p306.log | head -12; grep -E "RESULT" $OUT/p304.log | cut -c1-200
grep -E "RESULT|WARN" $OUT/p330.log | cut -c1-420
