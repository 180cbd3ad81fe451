#!/usr/bin/env bash
# Session 53, call 14: the failing pair (call 12: fails from the second run on a machine) with a probe plugin.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/.dev/gt PYTHONUNBUFFERED=1
T=tests/gpu/test_pipeline.py
P="$T::test_pinned_input_gives_pinned_output $T::test_torch_compute_zero_copy"
for i in 1 2 3; do
  echo "== run $i"; timeout 60 python3 -m pytest -q -s -p no:cacheprovider -p dev_probe $P > $OUT/run$i.log 2>&1; grep -a -E "PROBE|passed|failed" $OUT/run$i.log | cut -c1-1500 | head -40
done
