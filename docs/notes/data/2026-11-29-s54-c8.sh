#!/usr/bin/env bash
# Session 54, call 8: workload C (4000 tiny batches, plain) under py-spy: where fullpipe's ~32 us a batch go
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 120 /tmp/site/bin/py-spy record -r 1000 --nonblocking -f raw -o $OUT/spy367.txt -- python3 .dev/p367.py 10 > $OUT/spy367.log 2>&1; echo "spy rc $?"; grep RESULT $OUT/spy367.log
python3 .dev/spyline.py $OUT/spy367.txt 40 > $OUT/spy367-agg.txt; head -75 $OUT/spy367-agg.txt
