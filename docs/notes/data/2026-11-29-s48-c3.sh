#!/usr/bin/env bash
# Session 48, call 3: p304, fullpipe's own time in a run of the variable-length list (--quick's size), profiled.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 150 python3 .dev/p304.py > $OUT/p304.log 2>&1; echo "p304 rc $?"; grep -E "RESULT|per run|host_us|list_path|Error" $OUT/p304.log | cut -c1-300
