"""Session 49: the first long-K rule's thresholds (a share of the clusters, slices) read on p311's JSON."""
import json, math, sys
sys.path.insert(0, "src")
from fullpipe.kernels import hopper_gemm as hg
gm = lambda v: math.exp(sum(map(math.log, v)) / len(v))
def new_label(m, n, k, t_min, s_min):
    t2 = hg.cluster_tiles(m, n, hg.PERSISTENT); sl = -(-k // 64)
    if m > 128 and sl >= s_min:
        return "2x1-g8" if 3 * t2 >= 66 * t_min else "1x1-g8-n128-s6"
    return None
f = sys.argv[1]
d = json.load(open(f))
for t_min in (0.25, 1/3, 0.4):
    for s_min in (94, 96, 128):
        old, new, best, worse = [], [], [], 0
        for r in d["results"]:
            us = r["us"]; m, n, k = r["m"], r["n"], r["k"]
            lab = new_label(m, n, k, t_min * 3, s_min) or r["rule"]
            old.append(us["cuBLAS"] / us[r["rule"]]); new.append(us["cuBLAS"] / us[lab])
            best.append(us["cuBLAS"] / min(t for nm, t in us.items() if nm != "cuBLAS"))
            worse += us[lab] > us[r["rule"]] * 1.03
        print(f"{f.split('/')[-1]} tiles >= {t_min:.2f} of clusters, slices >= {s_min}: rule {gm(old):.3f} -> {gm(new):.3f} (best {gm(best):.3f}); "
              f"new/old {gm([a/b for a, b in zip(new, old)]):.3f}, min {min(a/b for a, b in zip(new, old)):.3f}; slower by >3%: {worse}")
