#!/usr/bin/env bash
# Session 54, call 12: workload A (NumPy list, compute_threads=1) under py-spy: fullpipe's own time against the MLP's call
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 150 /tmp/site/bin/py-spy record -r 1000 --nonblocking -f raw -o $OUT/spy368.txt -- python3 .dev/p368.py t1 spy > $OUT/spy368.log 2>&1; echo "spy rc $?"; grep RESULT $OUT/spy368.log
python3 .dev/spyline.py $OUT/spy368.txt 45 > $OUT/spy368-agg.txt; head -50 $OUT/spy368-agg.txt
