#!/usr/bin/env bash
# Session 53, call 10: the failing pair (a MixKernel test, then the first `import torch`) under pytest's options.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
T=tests/gpu/test_pipeline.py
P="$T::test_identity_and_sink $T::test_pinned_input_gives_pinned_output $T::test_torch_compute_zero_copy"
for o in "" "-s" "-p no:faulthandler" "-p no:warnings" "-W ignore" "-p no:randomly -p no:xdist"; do
  echo "== [$o] $(timeout 60 python3 -m pytest -q -p no:cacheprovider $o $P 2>&1 | tail -1)"
done
ls ~/.cache 2>/dev/null; env | grep -i -E "^(FULLPIPE|CUDA_|PYTORCH|TORCH)" | head
