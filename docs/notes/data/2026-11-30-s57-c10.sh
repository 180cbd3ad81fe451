#!/usr/bin/env bash
# Session 57, call 10: hold-out of the 64-row blocks in place of 128 x 256 pairs below half a wave (seed 405)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r; export OUT=/tmp/r
timeout 150 python3 .dev/p389.py 405 30 129 256 3072 4224 6144 16384 64 > $OUT/p389-405.log 2>&1; echo "405 rc $?"; grep -hE "SUMMARY|WRONG" $OUT/p389-405.log | grep -v "(0)"
tar -czf $OUT_SAVE/c10.tgz -C /tmp/r .
