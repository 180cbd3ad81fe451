# session 36 call 8: long lists of larger batches measure threads too: torch GPU tests, then p244 again
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -x tests/gpu/test_pipeline_torch.py tests/gpu/test_pipeline_records.py > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -3 $OUT/tests.log
timeout 330 python3 docs/notes/data/2026-11-28-s36-p244.py 2>&1 > $OUT/p244.log; echo "p244 rc $?"
grep -v "^  first runs" $OUT/p244.log | grep -v "^  WARNING" | tail -45
