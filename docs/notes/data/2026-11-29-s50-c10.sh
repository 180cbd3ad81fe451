#!/usr/bin/env bash
# Session 50, call 10: p327 (held-out off-sector products of 129-256 rows at 8-11 cluster tiles: the rule before and after).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 200 python3 .dev/p327.py > $OUT/p327.log 2>&1; echo "p327 rc $?"
tail -3 $OUT/p327.log
