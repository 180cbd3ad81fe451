#!/usr/bin/env bash
# Session 53, call 16: the failing pair passes on a machine's first run and fails after: what does the first run
# write to disk? (files newer than a marker, outside /proc, /sys, /dev and the repo's own __pycache__)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
T=tests/gpu/test_pipeline.py
P="$T::test_pinned_input_gives_pinned_output $T::test_torch_compute_zero_copy"
touch /tmp/marker; sleep 1
echo "== run 1: $(timeout 60 python3 -m pytest -q -p no:cacheprovider $P 2>&1 | tail -1)"
find / -xdev -newer /tmp/marker -type f 2>/dev/null | grep -v -E "^/(proc|sys|dev)/|/tmp/site|$PWD/src|$PWD/tests" | head -60
echo "== run 2: $(timeout 60 python3 -m pytest -q -p no:cacheprovider $P 2>&1 | tail -1)"
