#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv,noheader
nproc; cat /proc/cpuinfo | grep "model name" | head -1
timeout 300 python3 docs/notes/data/2026-11-28-s32-p220.py > $OUT/p220.log 2>&1; echo "p220 rc $?"
grep -v "^ *[0-9]" $OUT/p220.log | head -60
