#!/usr/bin/env bash
# Session 54, call 3: p362 (timeline of one run on the caller's thread: the variable-length list; workload A)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 200 python3 .dev/p362.py > $OUT/p362.log 2>&1; echo "p362 rc $?"; grep -E "==|path|wall|Error" $OUT/p362.log | head
