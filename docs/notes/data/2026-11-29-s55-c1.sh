#!/usr/bin/env bash
# Session 55, call 1: py-spy over 200 runs of the variable-length list (p366): the caller's thread outside the loop, by line
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader; lscpu | grep "Model name"
timeout 60 python3 .dev/p366.py 200 2>&1 | grep RESULT
timeout 150 /tmp/site/bin/py-spy record --threads --idle -r 1000 --nonblocking -f raw -o $OUT/spy.txt -- python3 .dev/p366.py 200 > $OUT/spy.log 2>&1; echo "spy rc $?"; grep RESULT $OUT/spy.log
python3 .dev/spyset.py $OUT/spy.txt 200 45 > $OUT/spyset.txt; cat $OUT/spyset.txt
