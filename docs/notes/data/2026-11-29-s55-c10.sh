#!/usr/bin/env bash
# Session 55, call 10: py-spy (every thread, idle too) over u4: imap's first passes of 120 requests, whose trial windows took 40x
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
timeout 150 /tmp/site/bin/py-spy record --threads --idle -r 500 --nonblocking -f raw -o $OUT/spy.txt -- python3 .dev/u4.py 3 > $OUT/u4.log 2>&1; echo "spy rc $?"; grep -E "pass|RESULT" $OUT/u4.log
python3 .dev/spythreads.py $OUT/spy.txt 8 > $OUT/spythreads.txt; head -80 $OUT/spythreads.txt
