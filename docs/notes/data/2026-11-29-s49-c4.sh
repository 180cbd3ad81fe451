#!/usr/bin/env bash
# Session 49, call 4: p311 (every candidate on long-K products whose rule is a smaller build): seed 311 to read,
# seed 312 held out (looked at only after the rule is fitted on 311).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for s in 311 312; do P311_SEED=$s timeout 200 python3 .dev/p311.py > $OUT/p311-$s.log 2>&1; echo "p311 seed $s rc $?"; done
tail -2 $OUT/p311-311.log
