#!/usr/bin/env bash
# Session 53, call 5: the GIL test fixed (its event held), test_pipeline.py again, p352 on this host.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 120 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_pipeline.py > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -1 $OUT/tests.log; grep -E "^(FAILED|ERROR)|^E " $OUT/tests.log | head
timeout 80 python3 .dev/p352.py > $OUT/p352.log 2>&1; echo "p352 rc $?"; grep RESULT $OUT/p352.log
