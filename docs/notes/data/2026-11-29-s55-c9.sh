#!/usr/bin/env bash
# Session 55, call 9: u3 (u2's imap requests and dict batches, past their list trials)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader; lscpu | grep "Model name"
timeout 400 python3 .dev/u3.py > $OUT/u3.log 2>&1; echo "u3 rc $?"; grep -vE "^\s*$" $OUT/u3.log | grep -v Warning | tail -60
