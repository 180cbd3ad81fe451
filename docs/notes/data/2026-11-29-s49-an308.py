"""Session 49: p308's products where the rule's plan ran more than 5 % slower than the best candidate."""
import json, math, sys
sys.path.insert(0, "src")
from fullpipe.kernels import hopper_gemm as hg, gemm_tuning as gt
d = json.load(open(sys.argv[1] if len(sys.argv) > 1 else "/tmp/s49/c1/p308.json"))
gm = lambda v: math.exp(sum(map(math.log, v)) / len(v))
for r in d["results"]:
    us = r["us"]; m, n, k = r["m"], r["n"], r["k"]
    best = min((t, nm) for nm, t in us.items() if nm != "cuBLAS")
    rr = best[0] / us[r["rule"]]
    if rr < 0.95:
        b = hg.default_build(m, n, k, 132)
        t2 = hg.cluster_tiles(m, n, hg.PERSISTENT)
        sl = -(-k // 64)
        print(f"{m}x{n}x{k} {r['dtype']:9s} rule {r['rule']:20s} {rr:.3f} best {best[1]:22s} 2x1 tiles {t2} ({t2/66:.2f} waves) slices {sl} "
              f"| 2x1 {best[0]/us.get('2x1-g8', 1e9):.2f} 2x1sk {best[0]/us.get('2x1-g8+sk-all', 1e9):.2f} 2x1wh {best[0]/us.get('2x1-g8+whole', 1e9):.2f}")
