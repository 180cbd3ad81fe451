# session 36 call 14: after the tidy-up: graphs and torch GPU tests, bench overlap --quick
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 150 python3 -m pytest -q tests/gpu/test_pipeline_torch.py tests/gpu/test_pipeline_graphs.py tests/gpu/test_pipeline_records.py > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -2 $OUT/tests.log
timeout 200 python3 -m fullpipe.cli bench overlap --quick --out $OUT/ov > $OUT/overlap.log 2>&1; echo "overlap rc $?"
cp $OUT/ov/*.json $OUT/overlap.json; rm -rf $OUT/ov
python3 - $OUT/overlap.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for c in d["claims"]:
    print(f"  {c['key']:24s} {c['verdict']:16s} {c['measured'][:300]}")
PY
