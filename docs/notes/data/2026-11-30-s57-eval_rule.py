"""Evaluate default_build (the working tree's) on measured probe JSONs: for each product, the measured time of the
build the rule chooses (matched by label), against the measured 'rule' entry (the rule at probe time)."""
import json, math, sys
from fullpipe.kernels import hopper_gemm as hg
gm = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")
for f in sys.argv[1:]:
    d = json.load(open(f))
    ch, un, xs_new, xs_old, best = [], 0, [], [], []
    for r in d["results"]:
        m, n, k, us, L = r["m"], r["n"], r["k"], r["us"], r["labels"]
        new = hg.default_build(m, n, k, d["sms"], True).label
        hit = [x for x in L if L[x] == new]
        if not hit:
            un += 1
            print(f"  unmeasured {m}x{n}x{k}: {new} (rule then {L['rule']})")
            continue
        t = us[hit[0]]
        base = "old" if "old" in L else "rule"  # (p389 measured the rule before session 57 as "old")
        xs_new.append(us["cuBLAS"] / t); xs_old.append(us["cuBLAS"] / us[base])
        best.append(us["cuBLAS"] / min(v for x, v in us.items() if x != "cuBLAS"))
        if new != L[base]:
            ch.append((us[base] / t, m, n, k, new, L[base]))
    print(f"{f}: {len(xs_new)} products, x cuBLAS gm old {gm(xs_old):.3f} new {gm(xs_new):.3f} best {gm(best):.3f}; "
          f"{len(ch)} changed gm {gm([c[0] for c in ch]):.3f}, slower >3%: {sum(c[0] < 0.97 for c in ch)}; unmeasured {un}")
    for c in sorted(ch):
        print("   %.2f  %4d x %6d x %6d  %s  (was %s)" % c)
