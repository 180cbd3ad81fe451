python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gemm_tuning.py -rf 2>&1 | tail -4
timeout 90 python3 .dev/p283.py --host 2>&1 | tail -3
FULLPIPE_GEMM_TUNE=1 timeout 150 python3 .dev/p255.py > $OUT/p255-tune.log 2>&1; echo "p255 under FULLPIPE_GEMM_TUNE=1 rc=$?"; head -1 $OUT/p255-tune.log; grep -v "| OK |" $OUT/p255-tune.log | grep SCENARIO | head; grep -E "misaligned|perf_" $OUT/p255-tune.log
python3 - <<'PY'
import json, pathlib
p = pathlib.Path.home() / ".cache/fullpipe/gemm-tuning.json"
d = json.loads(p.read_text()); print("tuning file:", len(d["plans"]), "plans:", ", ".join(k.split("|", 1)[1] + " " + v["plan"]["kernel"] for k, v in d["plans"].items()))
PY
