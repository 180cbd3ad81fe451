#!/usr/bin/env bash
# Session 44, call 10: p294 (chunk='auto''s probes on five more torchvision models; evidence for the next session).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 170 python3 .dev/p294.py > $OUT/p294.log 2>&1; echo "p294 rc $?"; grep -E "RESULT|Error|error" $OUT/p294.log | cut -c1-260
