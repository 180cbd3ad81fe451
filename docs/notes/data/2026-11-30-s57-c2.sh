#!/usr/bin/env bash
# Session 57, call 2: p388 random products (fit: seeds 392 at 65-256 rows, 393 at 257-640)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r; export OUT=/tmp/r
timeout 280 python3 .dev/p388.py 392 60 65 256 > $OUT/p388-392.log 2>&1; echo "p388 392 rc $?"
timeout 280 python3 .dev/p388.py 393 60 257 640 > $OUT/p388-393.log 2>&1; echo "p388 393 rc $?"
grep -hE "SUMMARY|WRONG|compiled|total" $OUT/p388-*.log
tar -czf $OUT_SAVE/c2.tgz -C /tmp/r .
