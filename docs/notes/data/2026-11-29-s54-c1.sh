#!/usr/bin/env bash
# Session 54, call 1: p360 (where the caller's thread goes; the list against compute alone in four process states), u1 (new workloads)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader; nproc; lscpu | grep -E "Model name|Thread|Core|Socket" 
timeout 200 python3 .dev/p360.py > $OUT/p360.log 2>&1; echo "p360 rc $?"; grep RESULT $OUT/p360.log
timeout 300 python3 .dev/u1.py > $OUT/u1.log 2>&1; echo "u1 rc $?"; grep -E "RESULT|Error|error" $OUT/u1.log | head -30
