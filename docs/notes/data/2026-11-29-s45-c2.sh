#!/usr/bin/env bash
# Session 45, call 2: p296, a one-shot user's first run (fresh process per model and way).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 400 python3 .dev/p296.py > $OUT/p296.log 2>&1; echo "p296 rc $?"; grep -E "RESULT|failed|Error" $OUT/p296.log | cut -c1-400
