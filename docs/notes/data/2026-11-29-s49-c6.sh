#!/usr/bin/env bash
# Session 49, call 6: p313 (round against edged products at long K: which edge makes 128 x 128 tiles slow).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 150 python3 .dev/p313.py > $OUT/p313.log 2>&1; echo "p313 rc $?"; cat $OUT/p313.log | cut -c1-150
