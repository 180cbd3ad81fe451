#!/usr/bin/env bash
# Session 57, call 12: hold-out of the fill branch with whole tiles only (seed 408: 40 random products it takes)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r; export OUT=/tmp/r
P389_KEEP=fill timeout 200 python3 .dev/p389.py 408 40 257 1024 1024 16384 2048 16384 64 > $OUT/p389-408.log 2>&1; echo "408 rc $?"; grep -hE "SUMMARY|WRONG" $OUT/p389-408.log | grep -v "(0)"
tar -czf $OUT_SAVE/c12.tgz -C /tmp/r .
