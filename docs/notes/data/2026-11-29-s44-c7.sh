#!/usr/bin/env bash
# Session 44, call 7: p293 (what the probes read for a convnet's compute against its GPU time alone).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 200 python3 .dev/p293.py > $OUT/p293.log 2>&1; echo "p293 rc $?"; cat $OUT/p293.log | cut -c1-300 | tail -40
