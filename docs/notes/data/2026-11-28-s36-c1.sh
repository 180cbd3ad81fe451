# session 36 call 1: a52f861 on a GPU (torch, records, pipeline, graphs tests), then p241
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 python3 -m pytest -q -x tests/gpu/test_pipeline_torch.py tests/gpu/test_pipeline_records.py tests/gpu/test_pipeline.py tests/gpu/test_pipeline_graphs.py > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -3 $OUT/tests.log
timeout 200 python3 docs/notes/data/2026-11-28-s36-p241.py 2>&1 | tee $OUT/p241.log
