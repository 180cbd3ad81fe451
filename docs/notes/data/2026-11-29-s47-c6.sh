#!/usr/bin/env bash
# Session 47, call 6: p301 with chunk='auto''s models printed after each run (regnet_y_800mf), on the branch.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 60 python3 .dev/p301.py regnet_y_800mf > $OUT/p301.log 2>&1; echo "p301 rc $?"
grep -E "run |round|RESULT|Error|probes" $OUT/p301.log | cut -c1-420
echo "=== main"
PYTHONPATH=/tmp/site:$PWD/.dev/mainsrc/src timeout 60 python3 .dev/p301.py regnet_y_800mf > $OUT/p301-main.log 2>&1; echo "p301 main rc $?"
grep -E "run |round|RESULT|Error|probes" $OUT/p301-main.log | cut -c1-420
