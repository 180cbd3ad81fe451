# session 36 call 6: bench overlap --quick twice (the targets claim with the default timing)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
for i in 1 2; do
  timeout 250 python3 -m fullpipe.cli bench overlap --quick --out $OUT/ov$i > $OUT/overlap$i.log 2>&1; echo "overlap $i rc $?"
  cp $OUT/ov$i/*.json $OUT/overlap$i.json; rm -rf $OUT/ov$i
  python3 - $OUT/overlap$i.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for c in d["claims"]:
    print(f"  {c['key']:24s} {c['verdict']:16s} {c['measured'][:260]}")
PY
done
