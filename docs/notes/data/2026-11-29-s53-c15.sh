#!/usr/bin/env bash
# Session 53, call 15: when does chr(32) stop reading as a space (dev_probe2 around test phases and fullpipe calls)?
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/.dev/gt PYTHONUNBUFFERED=1
T=tests/gpu/test_pipeline.py
P="$T::test_pinned_input_gives_pinned_output $T::test_torch_compute_zero_copy"
for i in 1 2 3; do
  echo "== run $i"; timeout 60 python3 -m pytest -q -p no:cacheprovider -p dev_probe2 $P > $OUT/run$i.log 2>&1; grep -a -E "PROBE2|passed|failed" $OUT/run$i.log | head
done
