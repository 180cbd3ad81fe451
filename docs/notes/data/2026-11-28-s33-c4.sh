#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 330 python3 -m pytest -q -p no:cacheprovider --timeout 240 tests/gpu --ignore=tests/gpu/test_report.py > $OUT/suite.log 2>&1; echo "suite rc $?"; grep -E "^FAILED|^ERROR" $OUT/suite.log | head; tail -2 $OUT/suite.log
timeout 110 python3 -m fullpipe.cli bench workloads --out $OUT/wl > $OUT/wl.log 2>&1; echo "wl rc $?"; python3 .dev/wlsum.py $OUT/wl/workloads.json
timeout 100 python3 .dev/p226.py "x*2" MLP encoder > $OUT/p226.log 2>&1; grep -v "^$" $OUT/p226.log | tail -26
