#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 python3 -m fullpipe.cli bench workloads --out $OUT/wl > $OUT/wl.log 2>&1; echo "wl rc $?"
cp $OUT/wl/workloads.json $OUT/workloads.json; rm -rf $OUT/wl
python3 docs/notes/data/2026-11-28-s33-wlsum.py $OUT/workloads.json | cut -c1-330
