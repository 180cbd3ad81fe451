#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 100 python3 -m pytest -q -m gpu tests/gpu/test_pipeline_torch.py > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -1 $OUT/tests.log; grep -E "^FAILED|^E " $OUT/tests.log | head -20
timeout 150 python3 .dev/p238.py "encoder d1024" "2x d512" MLP > $OUT/p238.log 2>&1; echo "p238 rc $?"
grep -E "^\||WARNING|Error|auto:|first runs, auto" $OUT/p238.log | cut -c1-400
timeout 200 python3 -m fullpipe.cli bench workloads --out $OUT/wl > $OUT/wl.log 2>&1; echo "wl rc $?"
cp $OUT/wl/workloads.json $OUT/workloads.json; rm -rf $OUT/wl
python3 docs/notes/data/2026-11-28-s33-wlsum.py $OUT/workloads.json | grep -E "H200|variable|best peer|copy bound|compute alone \("
