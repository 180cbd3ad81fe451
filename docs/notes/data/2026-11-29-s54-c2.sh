#!/usr/bin/env bash
# Session 54, call 2: p361 (exclusive time on the caller's thread for the variable-length list; workloads A and C by way)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 300 python3 .dev/p361.py all > $OUT/p361.log 2>&1; echo "p361 rc $?"; grep -v "^   .*us/run excl" $OUT/p361.log | tail -30
