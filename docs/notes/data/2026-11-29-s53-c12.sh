#!/usr/bin/env bash
# Session 53, call 12: the torch-import failure of calls 5-10 on a fresh machine: does a warm kernel cache (MixKernel
# compiled by another process first) bring it? Then under PYTHONMALLOC=debug; and torch's schema-building code.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
T=tests/gpu/test_pipeline.py
P="$T::test_pinned_input_gives_pinned_output $T::test_torch_compute_zero_copy"
echo "cold cache: $(timeout 60 python3 -m pytest -q -p no:cacheprovider $P 2>&1 | tail -1)"
echo "again (cache warm now): $(timeout 60 python3 -m pytest -q -p no:cacheprovider $P 2>&1 | tail -1)"
echo "PYTHONMALLOC=debug: $(PYTHONMALLOC=debug timeout 60 python3 -m pytest -q -p no:cacheprovider $P 2>&1 | grep -E 'passed|failed|Debug|Fatal|bytes' | head -5)"
echo "FULLPIPE_NO_PIN? pin_in_place off not reachable from here; control identity: $(timeout 60 python3 -m pytest -q -p no:cacheprovider $T::test_identity_and_sink $T::test_torch_compute_zero_copy 2>&1 | tail -1)"
python3 - <<'PY'
import inspect, torch._library.infer_schema as m
src = inspect.getsource(m.infer_schema)
i = src.find("schema_type = None")
print(src[i:i+2200])
PY
