#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 100 python3 docs/notes/data/2026-11-28-s32-p225.py 2>&1 | tee $OUT/p225.log
timeout 330 python3 -m pytest -q -p no:cacheprovider --timeout 240 tests/gpu --ignore=tests/gpu/test_report.py > $OUT/suite.log 2>&1; echo "suite rc $?"; tail -4 $OUT/suite.log
