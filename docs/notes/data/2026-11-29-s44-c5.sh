#!/usr/bin/env bash
# Session 44, call 5: p292 (the two-level 'both' form's host cost at --quick size, profiled).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 300 python3 .dev/p292.py > $OUT/p292.log 2>&1; echo "p292 rc $?"; grep -E "RESULT|tokens|Error" $OUT/p292.log | tail
