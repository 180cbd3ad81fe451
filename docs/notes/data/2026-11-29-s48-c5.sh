#!/usr/bin/env bash
# Session 48, call 5: p306, the caller's thread's time outside the batches in a run of the variable-length list.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 120 python3 .dev/p306.py > $OUT/p306.log 2>&1; echo "p306 rc $?"; cut -c1-160 $OUT/p306.log | head -90
