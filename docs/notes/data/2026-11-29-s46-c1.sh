#!/usr/bin/env bash
# Session 46, call 1: the larger probe a likely chunk (tensor functions): torch pipeline GPU tests, fresh-process
# first runs (p296), steady state against fixed chunks (p295), and why the very first call is slow (p298).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 100 python3 -m pytest -q -p no:cacheprovider -x -rfE tests/gpu/test_pipeline_torch.py > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -2 $OUT/tests.log
P296_WAYS=auto,naive P296_ONLY=mobilenet_v3_large,resnet50,convnext_tiny,vit_b_16 timeout 190 python3 .dev/p296.py > $OUT/p296.log 2>&1; echo "p296 rc $?"
timeout 170 python3 .dev/p295.py > $OUT/p295.log 2>&1; echo "p295 rc $?"
timeout 100 python3 .dev/p298.py > $OUT/p298.log 2>&1; echo "p298 rc $?"
grep -E "RESULT|failed|Error" $OUT/p296.log | cut -c1-300
grep -E "RESULT|Error" $OUT/p295.log | cut -c1-250
grep -E "RESULT" $OUT/p298.log | cut -c1-600
