#!/usr/bin/env bash
# Session 48, call 6: outputs read and checked once a run (_OutsRead): p306 again, p304 (alone / 3 threads / fullpipe
# in alternating rounds), then `fullpipe bench workloads --quick`.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 100 python3 .dev/p306.py > $OUT/p306.log 2>&1; echo "p306 rc $?"; grep -E "MICRO|^  +[0-9.]+  |per run|gc:" $OUT/p306.log | head -24; grep "ms/run" $OUT/p306.log | head -14
timeout 100 python3 .dev/p304.py > $OUT/p304.log 2>&1; echo "p304 rc $?"; grep -E "RESULT|per run" $OUT/p304.log | cut -c1-250
timeout 120 python3 -m fullpipe bench workloads --quick --out $OUT/wq > $OUT/workloads-quick.log 2>&1; echo "workloads rc $?"
grep -E "within 5 %|compute alone|variable" $OUT/workloads-quick.log | cut -c1-220 | head
