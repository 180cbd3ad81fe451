# Session 39: the default-build rules tried on p267 (111 small products) by the builds' measured columns.
# Run from the repository root: python docs/notes/data/2026-11-28-s39-rules.py
import json, math, dataclasses, sys
import numpy as np
import fullpipe.kernels.hopper_gemm as hg
rows = json.load(open(sys.argv[1] if len(sys.argv) > 1 else "docs/notes/data/2026-11-28-s39-c4-p267-h200.json"))
SMS = 132
G = {"m128n64": (128, 64), "m128n128": (128, 128), "m64n64s8": (64, 64), "m64n128s8": (64, 128)}
def T(m, n, nm): tm, tn = G[nm]; return -(-m // tm) * -(-n // tn)
def default(m, n, k):   # session 38's rule (the builds p267 covers)
    nt = T(m, n, "m128n128")
    if 2 * nt > SMS: return "m128n128"
    sl = -(-k // 64)
    if m > 128 and sl >= 128 and nt * sl >= 34 * SMS: return "m128n128"
    return "m128n64"
def r1(m, n, k, longk=True, odd=False):
    d = default(m, n, k)
    if d == "m128n128" and not (2 * T(m, n, "m128n128") > SMS):   # the long-K choice: keep
        return d
    order = ["m128n128", "m64n128s8", "m128n64", "m64n64s8"]
    if odd and (m % 128 == 0 or m % 128 > 64):
        pass
    for nm in order:
        if 2 * T(m, n, nm) > SMS:
            if odd and nm.startswith("m128") and 0 < m % 128 <= 64 and m > 64:
                alt = "m64" + nm[4:] + ("s8" if not nm.endswith("s8") else "")
                return alt
            return nm
    return "m64n64s8"
def evaluate(rule, label):
    ratios = []
    for r in rows:
        us = r["us"]; best = min(G, key=lambda x: us[x])
        pick = rule(r["m"], r["n"], r["k"])
        ratios.append((us[pick] / us[best], r["m"], r["n"], r["k"], pick, best, us["cuBLAS"] / us[pick]))
    a = np.array([x[0] for x in ratios])
    cb = np.array([x[6] for x in ratios])
    print(f"{label:28s} within3% {int((a <= 1.03).sum()):3d}/{len(a)}  geomean best/pick {np.exp(np.mean(np.log(1/a))):.3f}  worst {a.max():.3f}  geomean x cuBLAS {np.exp(np.mean(np.log(cb))):.3f}")
    return sorted(ratios, reverse=True)
evaluate(default, "default (now)")
evaluate(lambda m, n, k: r1(m, n, k), "R1 half-wave, 64x128 first")
w = evaluate(lambda m, n, k: r1(m, n, k, odd=True), "R1 + odd 64-row blocks")
for x in w[:14]: print("   %.3f %dx%dx%d pick %s best %s  %.3f" % x)

def r2(m, n, k, longk_small=False):
    d = default(m, n, k)
    odd = (-(-m // 64)) % 2 == 1        # 128-row tiles would waste 64 rows of the last tile row
    if d == "m128n128" and not (2 * T(m, n, "m128n128") > SMS):   # the long-K choice
        return "m64n128s8" if odd else d
    middle = "m128n64" if 64 < m <= 128 else "m64n128s8"
    order = ["m64n128s8" if odd else "m128n128", middle, "m64n64s8"]
    for nm in order:
        if 2 * T(m, n, nm) > SMS:
            return nm
    return "m64n64s8"
w = evaluate(r2, "R2 odd/middle")
for x in w[:16]: print("   %.3f %dx%dx%d pick %s best %s  %.3f" % x)

def r3(m, n, k, frac=6):
    d = default(m, n, k)
    odd = (-(-m // 64)) % 2 == 1
    if d == "m128n128" and not (2 * T(m, n, "m128n128") > SMS):
        return "m64n128s8" if odd else d
    middle = "m128n64" if 64 < m <= 128 else "m64n128s8"
    order = ["m64n128s8" if odd else "m128n128", middle, "m64n64s8"]
    for nm in order:
        if 2 * T(m, n, nm) > SMS:
            return nm
    if m > 64 and -(-k // 64) >= hg.LONG_K_SLICES and frac * T(m, n, middle) >= SMS:
        return middle
    return "m64n64s8"
for f in (4, 5, 6, 8):
    w = evaluate(lambda m, n, k: r3(m, n, k, f), f"R3 long-K middle >= SMs/{f}")
for x in w[:12]: print("   %.3f %dx%dx%d pick %s best %s  %.3f" % x)

def r4(m, n, k, frac=6):
    d = default(m, n, k)
    odd = (-(-m // 64)) % 2 == 1
    if d == "m128n128" and not (2 * T(m, n, "m128n128") > SMS):
        return "m64n128s8" if odd else d
    middle = "m128n64" if 64 < m <= 128 else "m64n128s8"
    top = "m64n128s8" if odd else "m128n128"
    for nm in (top, middle):
        if 2 * T(m, n, nm) > SMS:
            return nm
    if m > 64 and -(-k // 64) >= hg.LONG_K_SLICES and frac * T(m, n, middle) >= SMS:
        return middle
    return "m64n64s8"
print()
for f in (4, 5, 6, 8, 1000):
    w = evaluate(lambda m, n, k: r4(m, n, k, f), f"R4 long-K middle >= SMs/{f}")
    if f == 6: w6 = w
for x in w6[:12]: print("   %.3f %dx%dx%d pick %s best %s  %.3f" % x)
print()
w = evaluate(lambda m, n, k: r4(m, n, k, 1000), "R4 always")
for x in w[:8]: print("   %.3f %dx%dx%d pick %s best %s  %.3f" % x)
print()
def code(m, n, k):
    b = hg.default_build(m, n, k, SMS)
    return {(128, 64): "m128n64", (128, 128): "m128n128", (64, 64): "m64n64s8", (64, 128): "m64n128s8"}[(b.tile_m, b.tile_n)]
w = evaluate(code, "the code's default_build")
