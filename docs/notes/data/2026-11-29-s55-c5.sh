#!/usr/bin/env bash
# Session 55, call 5: p370 old (session 54 end) vs new src (set-up trims + drain_here over the copier), alternating processes
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader; lscpu | grep "Model name"
for r in 1 2 3 4; do
  for v in old new; do
    if [ $v = old ]; then S=$PWD/.dev/old/src; else S=$PWD/src; fi
    PYTHONPATH=/tmp/site:$S timeout 60 python3 .dev/p370.py 200 $v 2>&1 | grep -E "RESULT|Error|error" | tee -a $OUT/p370.log
  done
done
export PYTHONPATH=/tmp/site:$PWD/src
cat $OUT/p370.log
