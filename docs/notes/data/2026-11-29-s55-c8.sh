#!/usr/bin/env bash
# Session 55, call 8: u2 (five workloads and a set of mistakes in no test, as a new user would write them)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader; lscpu | grep "Model name"
timeout 400 python3 .dev/u2.py > $OUT/u2.log 2>&1; echo "u2 rc $?"; grep -vE "^\s*$" $OUT/u2.log | grep -v Warning | tail -40
