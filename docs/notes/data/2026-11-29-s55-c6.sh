#!/usr/bin/env bash
# Session 55, call 6: the final code through the pipeline GPU tests (and the fake-driver CPU tests on a GPU machine);
# `fullpipe bench workloads --quick`
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
git log --oneline -1 2>/dev/null; nvidia-smi --query-gpu=name --format=csv,noheader; lscpu | grep "Model name"
timeout 300 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_pipeline.py tests/gpu/test_pipeline_torch.py tests/gpu/test_threads.py tests/gpu/test_pipeline_graphs.py tests/gpu/test_pipeline_records.py tests/gpu/test_pin_cache.py tests/gpu/test_pinned_pool.py tests/test_pipeline_bulk.py tests/test_pipeline_fakecuda.py > $OUT/pipeline-tests.log 2>&1; echo "pipeline tests rc $?"; tail -1 $OUT/pipeline-tests.log; grep -E "^(FAILED|ERROR)" $OUT/pipeline-tests.log | head
timeout 200 python3 -m fullpipe bench workloads --quick > $OUT/bench-workloads.log 2>&1; echo "bench rc $?"; cp fullpipe-out/workloads.json $OUT/ 2>/dev/null
python3 - <<'PY'
import json
d = json.load(open("fullpipe-out/workloads.json"))
m = d.get("metrics", d)
for name, w in m.get("workloads", {}).items():
    if "skipped" in w:
        print(name, "skipped", w["skipped"]); continue
    print(f"{name:16s} fullpipe {w['fullpipe_ms']:8.2f} ms, bound {w['bound_ms']:8.2f} -> {w['fullpipe_ratio']:.3f}x; best peer {w['best_peer']} {w['vs_best_peer']:.2f}x; threads {w.get('fullpipe_threads_ms')}; list {(w.get('list_path') or {}).get('path') if isinstance(w.get('list_path'), dict) else w.get('list_path')}; auto/best {w.get('auto_vs_best_fixed')}")
PY
