#!/usr/bin/env bash
# Session 51, call 2: p331 (who holds the GIL on the variable-length list): plain, then under py-spy --gil
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
for m in alone threads fp; do timeout 60 python3 .dev/p331.py $m 4 2>&1 | grep -E "RESULT|host_us|list_path" | cut -c1-300; done
for m in fp alone threads; do
  timeout 90 /tmp/site/bin/py-spy record --gil --threads -r 200 --nonblocking -f raw -o $OUT/spy-$m.txt -- python3 .dev/p331.py $m 10 > $OUT/spy-$m.log 2>&1; echo "spy $m rc $?"
  grep RESULT $OUT/spy-$m.log
  python3 .dev/spyagg.py $OUT/spy-$m.txt 25 > $OUT/spyagg-$m.txt; head -5 $OUT/spyagg-$m.txt
done
sed -n 5,40p $OUT/spyagg-fp.txt
