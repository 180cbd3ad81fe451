#!/usr/bin/env bash
# Session 47, call 1: branch s47-host-paced-probe (a host-paced smaller probe not fitted through). Same as s46 c3.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
P296_WAYS=auto,naive P296_ONLY=mobilenet_v3_large,resnet50,convnext_tiny,vit_b_16,efficientnet_b0,mlp timeout 200 python3 .dev/p296.py > $OUT/p296.log 2>&1; echo "p296 rc $?"
timeout 150 python3 .dev/p295.py > $OUT/p295.log 2>&1; echo "p295 rc $?"
timeout 90 python3 -m fullpipe bench workloads --quick --out $OUT/wq > $OUT/workloads-quick.log 2>&1; echo "workloads rc $?"
grep -E "RESULT|failed|Error" $OUT/p296.log | cut -c1-330; grep -o "\"chunk_[a-z]*\": \[[^]]*\]" $OUT/p296.log | cut -c1-200
grep -E "RESULT|Error" $OUT/p295.log | cut -c1-250
tail -25 $OUT/workloads-quick.log | cut -c1-250
