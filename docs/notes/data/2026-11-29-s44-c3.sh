#!/usr/bin/env bash
# Session 44, call 3: p291 (the GRU list's trial four times; resnet18 112 px chunk='auto' run by run).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 300 python3 .dev/p291.py > $OUT/p291.log 2>&1; echo "p291 rc $?"; grep -E "RESULT|Error" $OUT/p291.log | cut -c1-400 | tail -30
