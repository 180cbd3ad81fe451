#!/usr/bin/env bash
# Session 48, call 8: p307 again (form='cupy', the errors a user reads, a pinned tensor in), p302 (the even split's
# last chunk padded: one shape for 100 images), the torch pipeline GPU tests.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 200 python3 .dev/p307.py > $OUT/p307.log 2>&1; echo "p307 rc $?"; grep -E "RESULT" $OUT/p307.log | cut -c1-330
timeout 80 python3 .dev/p302.py > $OUT/p302.log 2>&1; echo "p302 rc $?"; grep -E "short|then|warnings|max err" $OUT/p302.log | tail -5 | cut -c1-220
timeout 120 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_pipeline_torch.py > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -1 $OUT/tests.log
