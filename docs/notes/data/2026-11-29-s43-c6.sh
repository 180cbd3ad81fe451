#!/usr/bin/env bash
# Session 43, call 6: the carry-over tie-break and the threads margin: p285, GPU tests, bench workloads quick and full, p255.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout 100 python3 .dev/p285.py 256 1024 > $OUT/p285.log 2>&1; echo "p285 rc $?"; grep -E "===|  fixed:" $OUT/p285.log
grep -E "out=fout" $OUT/p285.log | cut -c1-150
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_pipeline_torch.py tests/gpu/test_pin_cache.py tests/gpu/test_threads.py tests/gpu/test_pipeline.py > $OUT/tests.log 2>&1; echo "tests rc $?"; tail -2 $OUT/tests.log
for q in --quick ""; do
  timeout 240 python3 -m fullpipe bench workloads $q --out $OUT/wl$q > $OUT/wl$q.log 2>&1; echo "bench workloads $q rc $?"
  python3 - "$OUT/wl$q" <<'PY'
import json, sys, glob
d = json.load(open(glob.glob(sys.argv[1] + "/workloads.json")[0]))
m = d["metrics"]["workloads"]
for name, v in m.items():
    print(f"  {name:16s} ratio {v.get('fullpipe_ratio', 0):.3f}  vs best peer {v.get('vs_best_peer', 0):.2f}  auto/best fixed {v.get('auto_vs_best_fixed', float('nan')):.3f} "
          f"auto {((v.get('auto_chunk') or {}).get('bytes') or 0) / 2**20:.1f} MiB best {v.get('best_fixed_chunk')}")
for c in d.get("claims", []):
    print(f"  [{c.get('verdict')}] {str(c.get('measured'))[:160]}")
PY
done
timeout 150 python3 .dev/p255.py > $OUT/p255.log 2>&1; echo "p255 rc $?"; head -1 $OUT/p255.log; grep SCENARIO $OUT/p255.log | grep -v "| OK |" | head
