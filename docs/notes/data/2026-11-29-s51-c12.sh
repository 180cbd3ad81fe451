#!/usr/bin/env bash
# Session 51, call 12: the list's choice that follows each way's latest runs: the torch pipeline GPU tests,
# then `fullpipe bench workloads --quick`
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_pipeline_torch.py -x > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -3 $OUT/tests.log | cut -c1-300
timeout 170 python3 -m fullpipe bench workloads --quick --out $OUT/wq > $OUT/workloads-quick.log 2>&1; echo "workloads rc $?"
grep -E "compute alone|variable|within 5 %|peer" $OUT/workloads-quick.log | cut -c1-600 | head -12
