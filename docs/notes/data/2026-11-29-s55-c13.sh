#!/usr/bin/env bash
# Session 55, call 13: u5 (dict batches through an encoder layer with a padding mask, past the trial), py-spy of its defaults
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
timeout 150 /tmp/site/bin/py-spy record --threads --idle -r 1000 --nonblocking -f raw -o $OUT/spy.txt -- python3 .dev/u5.py 150 > $OUT/u5.log 2>&1; echo "spy rc $?"; grep RESULT $OUT/u5.log
python3 .dev/spythreads.py $OUT/spy.txt 14 timed_loop > $OUT/spythreads.txt; head -70 $OUT/spythreads.txt
