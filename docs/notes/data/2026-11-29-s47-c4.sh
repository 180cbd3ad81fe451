#!/usr/bin/env bash
# Session 47, call 4: branch s47-one-shape-first-run (a first run whose first call is costly runs at one batch
# shape; the smaller probe on the second run). Torch pipeline GPU tests; p296 first runs (naive FIRST: the first
# process of a model on a machine pays cold file caches, session 47 p300); p295 steady state; workloads --quick.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 120 python3 -m pytest -q -x tests/gpu/test_pipeline_torch.py > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -3 $OUT/tests.log
P296_WAYS=naive,auto P296_ONLY=mobilenet_v3_large,resnet50,convnext_tiny,vit_b_16,efficientnet_b0,mlp timeout 220 python3 .dev/p296.py > $OUT/p296.log 2>&1; echo "p296 rc $?"
timeout 150 python3 .dev/p295.py > $OUT/p295.log 2>&1; echo "p295 rc $?"
timeout 90 python3 -m fullpipe bench workloads --quick --out $OUT/wq > $OUT/workloads-quick.log 2>&1; echo "workloads rc $?"
grep -E "RESULT|failed|Error" $OUT/p296.log | cut -c1-330; grep -o "\"chunk_[a-z]*\": \[[^]]*\]" $OUT/p296.log | cut -c1-160
grep -E "RESULT|Error" $OUT/p295.log | cut -c1-250
grep -E "within 5 %|compute alone|variable" $OUT/workloads-quick.log | cut -c1-200 | head
