#!/usr/bin/env bash
# Session 48, call 2: p303, the variable-length workload's time: --quick's size (262144 tokens) and the full size.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 100 python3 .dev/p303.py > $OUT/p303-quick.log 2>&1; echo "p303 quick rc $?"; cut -c1-250 $OUT/p303-quick.log
timeout 150 python3 .dev/p303.py 1048576 > $OUT/p303-full.log 2>&1; echo "p303 full rc $?"; cut -c1-250 $OUT/p303-full.log
