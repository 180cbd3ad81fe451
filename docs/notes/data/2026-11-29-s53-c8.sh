#!/usr/bin/env bash
# Session 53, call 8: which test before test_torch_compute_zero_copy breaks the later `import torch`?
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
T=tests/gpu/test_pipeline.py
for t in test_run_is_bit_exact test_ring_modes_bit_exact test_copy_streams_bit_exact_and_nothing_leaks test_ten_thousand_random_batches_bit_exact_and_nothing_leaks test_identity_and_sink test_pinned_input_gives_pinned_output; do
  echo "== $t: $(timeout 60 python3 -m pytest -q -p no:cacheprovider $T::$t $T::test_torch_compute_zero_copy 2>&1 | tail -1)"
done
echo "== no test before: $(timeout 60 python3 -m pytest -q -p no:cacheprovider $T::test_torch_compute_zero_copy 2>&1 | tail -1)"
python3 - <<'PY'
import inspect, torch._library.infer_schema as m
src = inspect.getsource(m)
i = src.find("params.append")
print(src[i-600:i+400])
PY
