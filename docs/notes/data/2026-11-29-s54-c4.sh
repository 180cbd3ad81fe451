#!/usr/bin/env bash
# Session 54, call 4: p365 (does workload A's pinned output block go back when the outputs are dropped?)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 200 python3 .dev/p365.py > $OUT/p365.log 2>&1; echo "p365 rc $?"; cut -c1-330 $OUT/p365.log
