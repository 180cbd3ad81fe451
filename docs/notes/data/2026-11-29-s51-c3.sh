#!/usr/bin/env bash
# Session 51, call 3: p332 (the GIL's switch interval and the threads' pace), quick and full size
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 200 python3 .dev/p332.py > $OUT/p332-quick.log 2>&1; echo "quick rc $?"
grep -E "RESULT|list_path" $OUT/p332-quick.log | cut -c1-330
timeout 300 python3 .dev/p332.py 1048576 > $OUT/p332-full.log 2>&1; echo "full rc $?"
grep -E "RESULT|list_path" $OUT/p332-full.log | cut -c1-330
