#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader
for mode in naive nopad fullpipe; do timeout 90 python3 .dev/p151.py $mode 2>&1 | grep -v Warn | tail -4; done
timeout 150 python3 -m fullpipe.cli bench workloads --out $OUT/wl > $OUT/wl.log 2>&1; echo "wl rc=$?"
timeout 280 python3 -m fullpipe.cli bench gemm-hopper --out $OUT/gh > $OUT/gh.log 2>&1; echo "gh rc=$?"
tail -25 $OUT/gh.log
tail -30 $OUT/wl.log
