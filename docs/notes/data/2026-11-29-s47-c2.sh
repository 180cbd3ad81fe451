#!/usr/bin/env bash
# Session 47, call 2 (main's code): where a one-shot user's first run goes (p299: every call of the model logged,
# fresh process per model and way), and whether a shape seen on one thread costs again on another.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 100 python3 .dev/p299.py threads > $OUT/p299-threads.log 2>&1; echo "threads rc $?"
timeout 200 python3 .dev/p299.py > $OUT/p299.log 2>&1; echo "p299 rc $?"
cat $OUT/p299-threads.log | cut -c1-600
cut -c1-400 $OUT/p299.log
