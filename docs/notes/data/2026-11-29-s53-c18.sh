#!/usr/bin/env bash
# Session 53, call 18: the final code (the GIL binding after review, bulk addresses restored, compiler bytearrays):
# the pipeline GPU tests that run the protocol, bulk staging, graphs, torch and threads.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 170 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_pipeline.py tests/gpu/test_pipeline_graphs.py tests/gpu/test_pipeline_torch.py tests/gpu/test_threads.py > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -1 $OUT/tests.log; grep -E "^(FAILED|ERROR)" $OUT/tests.log | head
