#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
T="tests/gpu/test_pipelined_prefill.py tests/gpu/test_pool.py tests/gpu/test_role_stamps.py tests/gpu/test_runtime.py tests/gpu/test_skinny_gemm.py tests/gpu/test_stages.py tests/gpu/test_threads.py tests/gpu/test_trace.py tests/gpu/test_two_level.py"
timeout 220 python3 -m pytest -q -p no:cacheprovider --timeout 200 $T > $OUT/suite2.log 2>&1; echo "suite2 rc $?"; grep -E "^FAILED|^ERROR" $OUT/suite2.log | head; tail -2 $OUT/suite2.log
timeout 120 python3 -m fullpipe.cli bench workloads --out $OUT/wl > $OUT/wl.log 2>&1; echo "wl rc $?"; python3 .dev/wlsum.py $OUT/wl/workloads.json
