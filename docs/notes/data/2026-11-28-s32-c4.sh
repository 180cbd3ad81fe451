#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
P=docs/notes/data/2026-11-28-s32-p222.py
for w in double tiny enc; do
  timeout 100 /tmp/site/bin/py-spy record -r 200 --nonblocking -f raw -o $OUT/spy-$w.txt -- python3 $P $w 10 > $OUT/spy-$w.log 2>&1; echo "spy $w rc $?"
  python3 docs/notes/data/2026-11-28-s32-spyagg.py $OUT/spy-$w.txt 30 > $OUT/agg-$w.txt; gzip $OUT/spy-$w.txt
done
grep -h "runs" $OUT/spy-*.log
head -40 $OUT/agg-double.txt
