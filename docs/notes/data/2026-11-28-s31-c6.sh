#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv,noheader
timeout 400 python3 -m pytest -q -p no:cacheprovider --timeout 240 tests/gpu --ignore=tests/gpu/test_report.py > $OUT/suite.log 2>&1; echo "suite rc $?"
grep -E "^FAILED|^ERROR" $OUT/suite.log | head; tail -2 $OUT/suite.log
timeout 170 python3 -m fullpipe.cli bench workloads --out $OUT/wl > $OUT/wl.log 2>&1; echo "wl rc $?"
tail -25 $OUT/wl.log
timeout 120 python3 .dev/p209.py 2>&1 | grep -v Warn | tee $OUT/p209.log | tail -12
