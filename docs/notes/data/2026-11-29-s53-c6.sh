#!/usr/bin/env bash
# Session 53, call 6: call 5's failure at `import torch` (torch's schema parser): reproduce or not.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
python3 -c "import torch; print('import torch ok', torch.__version__)" 2>&1 | tail -2
for i in 1 2 3; do timeout 100 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_pipeline.py > $OUT/tests$i.log 2>&1; echo "tests rc $?"; tail -1 $OUT/tests$i.log; grep -E "^(FAILED|ERROR)|^E " $OUT/tests$i.log | head -4; done
