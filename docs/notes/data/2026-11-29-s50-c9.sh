#!/usr/bin/env bash
# Session 50, call 9: p320 (the models' Linear shapes through gemm(variant="hopper") beside torch) on the final code.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
P320_BUDGET_S=120 timeout 170 python3 .dev/p320.py > $OUT/p320.log 2>&1; echo "p320 rc $?"
tail -4 $OUT/p320.log
