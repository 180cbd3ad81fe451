#!/usr/bin/env bash
# Session 45, call 3: p297, where a first run goes.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 python3 .dev/p297.py > $OUT/p297.log 2>&1; echo "p297 rc $?"; grep -E "RESULT|failed|Error" $OUT/p297.log | cut -c1-400
