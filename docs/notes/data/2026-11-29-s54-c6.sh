#!/usr/bin/env bash
# Session 54, call 6: py-spy (1000 Hz, --threads --idle) over 200 runs of the variable-length list (p366): where the caller's thread goes
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 40 python3 .dev/p366.py 200 2>&1 | grep RESULT
timeout 120 /tmp/site/bin/py-spy record --threads --idle -r 1000 --nonblocking -f raw -o $OUT/spy366.txt -- python3 .dev/p366.py 200 > $OUT/spy366.log 2>&1; echo "spy rc $?"; grep RESULT $OUT/spy366.log
python3 .dev/spy366.py $OUT/spy366.txt 6 > $OUT/spy366-agg.txt; head -90 $OUT/spy366-agg.txt
