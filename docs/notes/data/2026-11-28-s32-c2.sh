#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 300 python3 docs/notes/data/2026-11-28-s32-p221.py > $OUT/p221.log 2>&1; echo "p221 rc $?"
grep -v "^ *[0-9]" $OUT/p221.log | head -40
