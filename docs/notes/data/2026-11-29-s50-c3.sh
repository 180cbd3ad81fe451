#!/usr/bin/env bash
# Session 50, call 3: p321 (gemm()'s host time per call, in pieces) and p322 (every candidate on p320's losing shapes).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 150 python3 .dev/p321.py > $OUT/p321.log 2>&1; echo "p321 rc $?"
timeout 240 python3 .dev/p322.py > $OUT/p322.log 2>&1; echo "p322 rc $?"
head -20 $OUT/p321.log; tail -3 $OUT/p322.log
