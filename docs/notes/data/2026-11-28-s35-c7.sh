#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 120 python3 -m pytest -q -m gpu tests/gpu/test_pipeline_torch.py > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -1 $OUT/tests.log; grep -E "^FAILED|^E " $OUT/tests.log | head -20
timeout 60 python3 .dev/p238.py "encoder d1024" > $OUT/p238.log 2>&1; echo "p238 rc $?"
grep -E "^\||WARNING|Error|auto:|first runs, auto" $OUT/p238.log | cut -c1-400
