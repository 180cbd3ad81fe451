# Session 58, call 8: the final code's user-level gemm test (both weight layouts); `fullpipe bench workloads --quick` on this host
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT_SAVE=$OUT; mkdir -p /tmp/r8; export OUT=/tmp/r8
lscpu | grep "Model name"
timeout 200 python3 -m pytest -q tests/gpu/test_gemm_transposed_b.py -p no:cacheprovider 2>&1 | tail -3 | tee $OUT/tests.log
timeout 300 python3 -m fullpipe bench workloads --quick > $OUT/bench-workloads.log 2>&1; echo "bench rc $?"; cp fullpipe-out/workloads.json $OUT/ 2>/dev/null
python3 - <<'PY' | tee $OUT/summary.txt
import json
d = json.load(open("fullpipe-out/workloads.json"))
m = d.get("metrics", d)
for name, w in m.get("workloads", {}).items():
    if "skipped" in w:
        print(name, "skipped", w["skipped"]); continue
    print(f"{name:16s} fullpipe {w['fullpipe_ms']:8.2f} ms, bound {w['bound_ms']:8.2f} -> {w['fullpipe_ratio']:.3f}x; best peer {w['best_peer']} {w['vs_best_peer']:.2f}x; threads {w.get('fullpipe_threads_ms')}; list {(w.get('list_path') or {}).get('path') if isinstance(w.get('list_path'), dict) else w.get('list_path')}; auto/best {w.get('auto_vs_best_fixed')}")
PY
tar -czf $OUT_SAVE/c8.tgz -C /tmp/r8 .
