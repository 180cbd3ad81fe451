#!/usr/bin/env bash
# Session 47, call 3 (main's code): p300, why a model's first call inside fullpipe costs more than the naive loop's.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 280 python3 .dev/p300.py > $OUT/p300.log 2>&1; echo "p300 rc $?"
cut -c1-330 $OUT/p300.log
