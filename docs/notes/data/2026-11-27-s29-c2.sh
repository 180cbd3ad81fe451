#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv,noheader
timeout 120 python3 .dev/p196.py > $OUT/p196.log 2>&1; echo "p196 rc $?"
timeout 200 python3 -m fullpipe.cli bench workloads --out $OUT/wl > $OUT/wl.log 2>&1; echo "wl rc=$?"
timeout 240 python3 -m pytest -q -p no:cacheprovider --timeout 200 tests/gpu/test_pipeline_torch.py tests/gpu/test_pipeline.py tests/gpu/test_threads.py tests/gpu/test_pin_cache.py tests/gpu/test_interop.py tests/gpu/test_pipeline_graphs.py > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -3 $OUT/tests.log
head -40 $OUT/p196.log | grep -v "^ *$"
tail -32 $OUT/wl.log
