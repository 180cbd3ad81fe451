#!/usr/bin/env bash
# Session 55, call 16: py-spy over u6: the dict batches' model called by fullpipe's plain run against compute alone
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
timeout 100 /tmp/site/bin/py-spy record --idle -r 1000 --nonblocking -f raw -o $OUT/spy.txt -- python3 .dev/u6.py 60 > $OUT/u6.log 2>&1; echo "spy rc $?"; grep RESULT $OUT/u6.log
python3 .dev/spycall.py $OUT/spy.txt 60 60 > $OUT/spycall.txt; cat $OUT/spycall.txt
