#!/usr/bin/env bash
# Session 46, call 2: probes at a likely chunk and a quarter of it; the first run pads its last chunk where a
# new shape costs a good part of the predicted run. Torch pipeline tests, fresh-process first runs (p296, with
# the copy-heavy MLP), steady state (p295), resnet50's first-run calls (p298), bench workloads --quick.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 100 python3 -m pytest -q -p no:cacheprovider -x -rfE tests/gpu/test_pipeline_torch.py > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -1 $OUT/tests.log
P296_WAYS=auto,naive P296_ONLY=mobilenet_v3_large,resnet50,convnext_tiny,vit_b_16,efficientnet_b0,mlp timeout 200 python3 .dev/p296.py > $OUT/p296.log 2>&1; echo "p296 rc $?"
timeout 30 python3 .dev/p298.py fullpipe 4096 > $OUT/p298.log 2>&1; echo "p298 rc $?"
timeout 150 python3 .dev/p295.py > $OUT/p295.log 2>&1; echo "p295 rc $?"
timeout 90 python3 -m fullpipe bench workloads --quick --out $OUT/wq > $OUT/workloads-quick.log 2>&1; echo "workloads rc $?"
grep -E "RESULT|failed|Error" $OUT/p296.log | cut -c1-330
cut -c1-900 $OUT/p298.log
grep -E "RESULT|Error" $OUT/p295.log | cut -c1-250
tail -25 $OUT/workloads-quick.log | cut -c1-250
