#!/usr/bin/env bash
# Session 44, call 2: p290 (the GRU list's threads; resnet18 112 px and conv1d chunk='auto' against fixed chunks).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 400 python3 .dev/p290.py > $OUT/p290.log 2>&1; echo "p290 rc $?"; grep -E "RESULT|Error|GRU calls" $OUT/p290.log | tail -30
