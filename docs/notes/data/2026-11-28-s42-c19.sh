python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gemm_tuning.py tests/gpu/test_hopper_gemm.py tests/gpu/test_skinny_gemm.py tests/gpu/test_gemm_transposed_b.py tests/gpu/test_models.py tests/gpu/test_two_level.py -rf > $OUT/tests.log 2>&1; echo "tests rc=$?"; tail -3 $OUT/tests.log
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for t in memcheck synccheck; do extra=""; [ $t = memcheck ] && extra="--report-api-errors no"
timeout 120 $cs --tool $t $extra --error-exitcode 9 python3 .dev/p283.py > $OUT/$t-p283.log 2>&1; echo "$t p283 rc=$? ok=$(grep -c '^ok' $OUT/$t-p283.log) bad=$(grep -c '^BAD' $OUT/$t-p283.log) $(grep -E 'ERROR SUMMARY' $OUT/$t-p283.log | tail -1)"; done
timeout 60 python3 .dev/p283.py --host 2>&1 | grep host
timeout 60 python3 -m fullpipe tune-gemm 776x4112x11096 96x5528x11016 4096x4096x4096 --w-t 2>&1 | tail -12
FULLPIPE_GEMM_TUNE=1 timeout 150 python3 .dev/p255.py > $OUT/p255-tune.log 2>&1; echo "p255 under FULLPIPE_GEMM_TUNE=1 rc=$?"; head -1 $OUT/p255-tune.log; grep -v "| OK |" $OUT/p255-tune.log | grep SCENARIO | head
python3 - <<'PY'
import json, pathlib
p = pathlib.Path.home() / ".cache/fullpipe/gemm-tuning.json"
d = json.loads(p.read_text()); print("tuning file:", len(d["plans"]), "plans")
PY
