#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader; nproc
timeout 200 python3 -m pytest -q -x -m gpu tests/gpu/test_pipeline_torch.py tests/gpu/test_pipeline_records.py tests/gpu/test_pipeline.py tests/gpu/test_pipeline_graphs.py > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -3 $OUT/tests.log
timeout 200 python3 -m fullpipe.cli bench workloads --out $OUT/wl > $OUT/wl.log 2>&1; echo "wl rc $?"
python3 docs/notes/data/2026-11-28-s33-wlsum.py $OUT/wl/workloads.json
timeout 120 python3 -m fullpipe.cli bench overlap --quick --out $OUT/ov > $OUT/overlap.log 2>&1; echo "overlap rc $?"
grep -E "enqueue|floor|graph" $OUT/ov/overlap.json | head -12
