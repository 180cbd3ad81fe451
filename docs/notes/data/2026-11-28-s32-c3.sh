#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
P=docs/notes/data/2026-11-28-s32-p222.py
for w in tiny double; do timeout 100 python3 $P $w 0 > $OUT/p222-$w.log 2>&1; echo "$w rc $?"; done
for w in tiny double enc; do
  timeout 60 /tmp/site/bin/py-spy record -r 1000 -f raw -o $OUT/spy-$w.txt -- python3 $P $w 12 > $OUT/spy-$w.log 2>&1; echo "spy $w rc $?"
done
tail -3 $OUT/spy-*.log
grep -h "  tiny\|  double\|wall\|host per" $OUT/p222-*.log
