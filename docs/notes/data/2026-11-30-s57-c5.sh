#!/usr/bin/env bash
# Session 57, call 5: hold-out of the one-wave 64-row-block branch (seeds 398, 399: K multiples of 64); a user's
# Llama-3-8B projection stack through gemm() at 100-1000 tokens
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r; export OUT=/tmp/r
timeout 120 python3 .dev/p389.py 398 40 65 256 4224 8448 4096 16384 64 > $OUT/p389-398.log 2>&1; echo "398 rc $?"; grep -E "SUMMARY M=(65|129)|WRONG" $OUT/p389-398.log
timeout 120 python3 .dev/p389.py 399 40 65 256 1024 8448 2048 12288 64 > $OUT/p389-399.log 2>&1; echo "399 rc $?"; grep -E "SUMMARY M=(65|129)|WRONG" $OUT/p389-399.log
timeout 200 python3 .dev/p391_model.py 100,200,300,384,500,777,1000 > $OUT/p391.log 2>&1; echo "p391 rc $?"; cat $OUT/p391.log | tail -8
tar -czf $OUT_SAVE/c5.tgz -C /tmp/r .
