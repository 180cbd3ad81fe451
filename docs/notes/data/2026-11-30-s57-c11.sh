#!/usr/bin/env bash
# Session 57, call 11: hold-out of one more tile of rows in 128-row blocks where it fills the GPU better than 128 x 256
# pairs (seed 406: 30 random products the branch takes, K multiples of 64); seed 407 (random 257-1024 rows)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r; export OUT=/tmp/r
P389_KEEP=fill timeout 150 python3 .dev/p389.py 406 30 257 1024 1024 16384 2048 16384 64 > $OUT/p389-406.log 2>&1; echo "406 rc $?"; grep -hE "SUMMARY|WRONG" $OUT/p389-406.log | grep -v "(0)"
timeout 150 python3 .dev/p389.py 407 40 257 1024 1024 16384 2048 16384 64 > $OUT/p389-407.log 2>&1; echo "407 rc $?"; grep -hE "SUMMARY|WRONG" $OUT/p389-407.log | grep -v "(0)"
tar -czf $OUT_SAVE/c11.tgz -C /tmp/r .
