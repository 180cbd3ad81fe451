#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 420 python3 -m pytest -q -p no:cacheprovider --timeout 240 tests/gpu --ignore=tests/gpu/test_report.py > $OUT/suite.log 2>&1
echo "suite rc=$?"
grep -E "passed|failed|error" $OUT/suite.log | tail -3
grep -E "^(FAILED|ERROR)" $OUT/suite.log | head -20
timeout 60 python3 .dev/p150.py fullpipe 2>&1 | grep -v Warn | tail -3
timeout 60 python3 .dev/p149.py fullpipe mobilenet_v3_large 2>&1 | grep -E "^fullpipe"
