#!/usr/bin/env bash
# Session 49, call 2: p309 (2 x 1 clusters at one wave and below: every tile dealt out against whole tiles).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 300 python3 .dev/p309.py > $OUT/p309.log 2>&1; echo "p309 rc $?"; tail -3 $OUT/p309.log
