#!/usr/bin/env bash
# Session 47, call 7: the branch with the framework's memory re-read at the second run's probes: p301 regnet
# (branch, then main), p295 all nine models.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 60 python3 .dev/p301.py regnet_y_800mf > $OUT/p301.log 2>&1; echo "p301 rc $?"
PYTHONPATH=/tmp/site:$PWD/.dev/mainsrc/src timeout 60 python3 .dev/p301.py regnet_y_800mf > $OUT/p301-main.log 2>&1; echo "p301 main rc $?"
timeout 170 python3 .dev/p295.py > $OUT/p295.log 2>&1; echo "p295 rc $?"
grep -E "round|RESULT|Error" $OUT/p301.log | cut -c1-200; grep -o "direct/ring.\{0,400\}" $OUT/p301.log | grep -o "cbytes.\{0,30\}" | head -3
echo "== main"; grep -E "RESULT|Error" $OUT/p301-main.log | cut -c1-200; grep -o "ring/ring.\{0,400\}" $OUT/p301-main.log | grep -o "cbytes.\{0,30\}" | head -2
grep -E "RESULT|Error" $OUT/p295.log | cut -c1-250
