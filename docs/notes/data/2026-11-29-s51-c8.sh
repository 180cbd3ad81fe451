#!/usr/bin/env bash
# Session 51, call 8: p335 (held-out: one row of clusters, 128 x 128 tiles alone or in clusters of 2 sharing B)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 300 python3 .dev/p335.py > $OUT/p335.log 2>&1; echo "p335 rc $?"; grep -vE "^\s*$" $OUT/p335.log | tail -48
