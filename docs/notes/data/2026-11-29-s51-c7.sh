#!/usr/bin/env bash
# Session 51, call 7: p334 (200-row products: 128 x 128 tiles in clusters of 2 sharing B, beside every candidate)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 300 python3 .dev/p334.py > $OUT/p334.log 2>&1; echo "p334 rc $?"; grep -vE "^\s*$" $OUT/p334.log | tail -25
