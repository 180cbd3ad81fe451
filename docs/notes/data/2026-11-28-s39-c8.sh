python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 200 python3 .dev/p255.py > $OUT/p255.log 2>&1; echo "p255 rc=$?"; grep -v "| OK |" $OUT/p255.log | grep -B3 -A10 "SUMMARY" | head -30
timeout 240 python3 -m fullpipe.cli bench overlap --quick --out $OUT/ov > $OUT/overlap.log 2>&1; echo "overlap rc $?"
cp $OUT/ov/*.json $OUT/overlap.json; rm -rf $OUT/ov
python3 - $OUT/overlap.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for c in d["claims"]:
    print(f"  {c['key']:24s} {c['verdict']:16s} {c['measured'][:300]}")
PY
