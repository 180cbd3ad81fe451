#!/usr/bin/env bash
# Session 47, call 5: p295 (as p301, with each timed run of chunk='auto' printed) for the two models that read
# slower than the best fixed chunk in call 4 (regnet_y_800mf 0.66x, vit_b_16 0.91x), twice.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 100 python3 .dev/p301.py regnet_y_800mf vit_b_16 > $OUT/p301.log 2>&1; echo "p301 rc $?"
timeout 60 python3 .dev/p301.py regnet_y_800mf > $OUT/p301b.log 2>&1; echo "p301b rc $?"
grep -E "run |round|RESULT|Error" $OUT/p301.log $OUT/p301b.log | cut -c1-330
