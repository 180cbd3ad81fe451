# Session 39: long-K variants of the rule on p267 and the held-out p268 (not adopted: see the notes).
import json, math
import numpy as np
SMS = 132
d1 = json.load(open("docs/notes/data/2026-11-28-s39-c4-p267-h200.json"))
for r in d1:
    r["us"] = {{"m64n64s8": "m64n64", "m64n128s8": "m64n128"}.get(k, k): v for k, v in r["us"].items()}
d2 = json.load(open("docs/notes/data/2026-11-28-s39-c6-p268-h200.json"))
G = {"m128n64": (128, 64), "m128n128": (128, 128), "m64n64": (64, 64), "m64n128": (64, 128)}
def T(m, n, nm): tm, tn = G[nm]; return -(-m // tm) * -(-n // tn)
def rule(m, n, k, L=128, work=34, small_m_longk=False, one_row_longk=False):
    odd = (-(-m // 64)) % 2 == 1 and T(m, n, "m64n128") <= SMS
    top = "m64n128" if odd else "m128n128"
    if 2 * T(m, n, top) > SMS: return top
    sl = -(-k // 64)
    long_k = sl >= L
    if long_k and T(m, n, "m128n128") * sl >= work * SMS and (m > 128 or (one_row_longk and m > 64) or (small_m_longk and m <= 64)):
        return top
    middle = "m128n64" if 64 < m <= 128 else "m64n128"
    if 2 * T(m, n, middle) > SMS or (sl >= 128 and m > 64): return middle
    return "m64n64"
def ev(data, f):
    a = []; cb = []
    for r in data:
        us = r["us"]; best = min(us[x] for x in G); p = f(r["m"], r["n"], r["k"])
        a.append(best / us[p]); cb.append(us["cuBLAS"] / us[p])
    a = np.array(a)
    return f"within3% {int((a >= 0.97).sum()):3d}/{len(a)} geomean {np.exp(np.log(a).mean()):.3f} min {a.min():.3f} xcuBLAS {np.exp(np.log(cb).mean()):.3f}"
for L in (128, 112, 96, 80, 64):
    for work in (34, 20, 0):
        for sm, orw in ((False, False), (True, False), (True, True)):
            f = lambda m, n, k: rule(m, n, k, L, work, sm, orw)
            print(f"L={L:3d} work={work:2d} m<=64:{sm:d} 65-128:{orw:d} | p267 {ev(d1, f)} | p268 {ev(d2, f)}")
