# session 36 call 10: the final code: GPU tests, bench overlap --quick, bench workloads
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q tests/gpu/test_pipeline_torch.py tests/gpu/test_pipeline_records.py tests/gpu/test_pipeline.py tests/gpu/test_pipeline_graphs.py > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -2 $OUT/tests.log
timeout 200 python3 -m fullpipe.cli bench overlap --quick --out $OUT/ov > $OUT/overlap.log 2>&1; echo "overlap rc $?"
cp $OUT/ov/*.json $OUT/overlap.json; rm -rf $OUT/ov
python3 - $OUT/overlap.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for c in d["claims"]:
    print(f"  {c['key']:24s} {c['verdict']:16s} {c['measured'][:230]}")
PY
timeout 240 python3 -m fullpipe.cli bench workloads --out $OUT/wl > $OUT/workloads.log 2>&1; echo "workloads rc $?"
cp $OUT/wl/workloads.json $OUT/ 2>/dev/null || cp $OUT/wl/*.json $OUT/workloads.json; rm -rf $OUT/wl
python3 docs/notes/data/2026-11-28-s33-wlsum.py $OUT/workloads.json
