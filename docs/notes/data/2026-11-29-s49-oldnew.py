"""Session 49: the rule's plan at 673fa06 (before the long-K change) against the current rule, read from
every candidate measured in a probe's JSON (p308, p311-p316). Before running it:
git show 673fa06:src/fullpipe/kernels/hopper_gemm.py > src/fullpipe/kernels/_old_hg_tmp.py (remove it after).
Usage: python oldnew.py docs/notes/data/2026-11-29-s49-c8-p316-316-h200.json ..."""
import json, math, sys
sys.path.insert(0, "src")
from fullpipe.kernels import gemm_tuning as gt, _old_hg_tmp as old
gm = lambda v: math.exp(sum(map(math.log, v)) / len(v))
for p in sys.argv[1:]:
    O, N, B, worse, better = [], [], [], [], []
    for r in json.load(open(p))["results"]:
        m, n, k = r["m"], r["n"], r["k"]; us = r["us"]; wt = "w.T" in r["dtype"]
        ol = old.default_build(m, n, k, 132).label
        nl = gt.rule_plan(m, n, k, 132, wt).label
        O.append(us["cuBLAS"] / us[ol]); N.append(us["cuBLAS"] / us[nl]); B.append(us["cuBLAS"] / min(t for x, t in us.items() if x != "cuBLAS"))
        if N[-1] < O[-1] * 0.97: worse.append(f"{m}x{n}x{k}{' wT' if wt else ''} {N[-1]/O[-1]:.2f}")
        if N[-1] > O[-1] * 1.03: better.append(N[-1] / O[-1])
    print(p.split("/")[-1], len(O), f"old {gm(O):.3f} new {gm(N):.3f} (x{gm(N)/gm(O):.3f}) best {gm(B):.3f}; changed and faster >3%: {len(better)} "
          f"({min(better, default=0):.2f}-{max(better, default=0):.2f}); slower >3%: {worse}")
