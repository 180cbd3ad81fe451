#!/usr/bin/env bash
# Session 55, call 15: p373 (u5's model on separate tensors or on unpacked records, default or side stream)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
timeout 120 python3 .dev/p373.py 2>&1 | grep -E "RESULT|Error" | tee $OUT/p373.log
