#!/usr/bin/env bash
# Session 43, call 1: the whole GPU suite but the quick report (last run whole in session 32).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
to=""; python3 -c "import pytest_timeout" 2>/dev/null && to="--timeout 240"
timeout 570 python3 -m pytest -q -p no:cacheprovider $to -rfE --durations=25 tests/gpu --ignore=tests/gpu/test_report.py > $OUT/suite.log 2>&1; echo "suite rc $?"
grep -E "passed|failed|error" $OUT/suite.log | tail -3
grep -E "^(FAILED|ERROR)" $OUT/suite.log | head -30
