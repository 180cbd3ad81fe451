#!/usr/bin/env bash
# Session 53, call 7: is call 5's `import torch` failure inside test_pipeline.py the GIL change's? The same tests with
# session 52's src (before it) and with this session's; the zero-copy test alone with each.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1
for src in .dev/old/src src; do
  echo "== $src"
  PYTHONPATH=/tmp/site:$PWD/$src timeout 60 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_pipeline.py -k zero_copy 2>&1 | tail -1
  PYTHONPATH=/tmp/site:$PWD/$src timeout 100 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_pipeline.py -k "not keep_the_gil" 2>&1 | grep -E "passed|failed|^E " | head -4
  PYTHONPATH=/tmp/site:$PWD/$src python3 -c "import fullpipe, fullpipe.pipeline; import torch; print('fullpipe then torch ok')" 2>&1 | tail -1
done
