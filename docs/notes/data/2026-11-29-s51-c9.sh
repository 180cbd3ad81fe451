#!/usr/bin/env bash
# Session 51, call 9: p320 (the model-layer tour of session 50) on this session's code; p330 (the new user's tour) again
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 200 python3 .dev/p320.py > $OUT/p320.log 2>&1; echo "p320 rc $?"; tail -12 $OUT/p320.log | cut -c1-250
timeout 300 python3 .dev/p330.py > $OUT/p330.log 2>&1; echo "p330 rc $?"; grep -E "RESULT" $OUT/p330.log | cut -c1-200
