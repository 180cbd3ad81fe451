#!/usr/bin/env bash
# Session 48, call 7: p307, a new user's tour (workloads no test has), on the session's code.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 240 python3 .dev/p307.py > $OUT/p307.log 2>&1; echo "p307 rc $?"; grep -E "RESULT" $OUT/p307.log | cut -c1-330; grep -E "Warning|Error" $OUT/p307.log | sort | uniq -c | head -20
