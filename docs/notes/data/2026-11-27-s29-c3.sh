#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv,noheader
timeout 120 python3 .dev/p196.py > $OUT/p196.log 2>&1; echo "p196 rc $?"
timeout 400 python3 -m pytest -q -p no:cacheprovider --timeout 240 tests/gpu --ignore=tests/gpu/test_report.py > $OUT/suite.log 2>&1; echo "suite rc $?"
tail -4 $OUT/suite.log
head -8 $OUT/p196.log
