#!/usr/bin/env bash
# Session 48, call 10: `bench workloads --quick` twice more on the final code: the variable-length list's spread.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
for i in 1 2; do
  timeout 75 python3 -m fullpipe bench workloads --quick --out $OUT/wq$i > $OUT/workloads-quick-$i.log 2>&1; echo "workloads $i rc $?"
  python3 - $OUT/wq$i/workloads.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for c in d["claims"]:
    print(f"  {c['key']:26s} {c['verdict']:18s} {c['ratio']:.3f} {c['measured'][:120]}")
PY
done
