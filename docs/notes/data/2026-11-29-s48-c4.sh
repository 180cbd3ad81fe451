#!/usr/bin/env bash
# Session 48, call 4: p305, the caller's thread's time per fullpipe function in a run of the variable-length list.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 120 python3 .dev/p305.py > $OUT/p305.log 2>&1; echo "p305 rc $?"; cut -c1-160 $OUT/p305.log | head -90
