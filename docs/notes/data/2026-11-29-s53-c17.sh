#!/usr/bin/env bash
# Session 53, call 17: the torch-import failure's cause: each compile's log and b" " (session 52's src), then the fix.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1
T=tests/gpu/test_pipeline.py
P="$T::test_pinned_input_gives_pinned_output $T::test_torch_compute_zero_copy"
for src in .dev/old/src .dev/old/src src src; do
  echo "== $src: $(PYTHONPATH=/tmp/site:$PWD/$src:$PWD/.dev/gt timeout 60 python3 -m pytest -q -p no:cacheprovider -p dev_probe3 $P > $OUT/r.log 2>&1; grep -a -E 'PROBE3' $OUT/r.log | head -3; tail -1 $OUT/r.log)"
done
