#!/usr/bin/env bash
# Session 56, call 9: the 64-row-block branch held out (p385 seed 390, 40 products it takes), p384 layer shapes
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
mkdir -p /tmp/r; OUT_SAVE=$OUT; export OUT=/tmp/r
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv,noheader
timeout 200 python3 .dev/p385.py 390 40 > /tmp/r/p385-390.log 2>&1; echo "p385 390 rc $?"; grep -E "SUMMARY|new/old|WRONG|Error|total" /tmp/r/p385-390.log
timeout 150 python3 .dev/p384.py 100,120,129,160,200,224,250 > /tmp/r/p384.log 2>&1; echo "p384 rc $?"; grep -E "SUMMARY|WRONG|Error|total" /tmp/r/p384.log
tar -czf $OUT_SAVE/c9.tgz -C /tmp/r .
