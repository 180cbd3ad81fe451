#!/usr/bin/env bash
# Session 50, call 5: p324 (a launch's host cost by three paths; operand pieces; cuBLAS's kernels on p320's losing shapes).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 150 python3 .dev/p324.py > $OUT/p324.log 2>&1; echo "p324 rc $?"
cut -c1-400 $OUT/p324.log
