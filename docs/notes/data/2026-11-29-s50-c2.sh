#!/usr/bin/env bash
# Session 50, call 2: p320 again, its graphs captured on the capture's stream (call 1 passed a fixed stream), with the
# caller's thread per call.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
P320_BUDGET_S=260 timeout 360 python3 .dev/p320.py > $OUT/p320.log 2>&1; echo "p320 rc $?"
tail -8 $OUT/p320.log
