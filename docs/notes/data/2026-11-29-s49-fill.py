"""Session 49: 128 x 256 (2 x 1) against 128 x 128 at long K, by the fill of the SMs (it did not separate them)."""
import json, math, sys
sys.path.insert(0, "src")
from fullpipe.kernels import hopper_gemm as hg
SMS = 132
def fill(m, n, k, b):
    clusters = SMS // b.cluster
    T = hg.cluster_tiles(m, n, b); sl = -(-k // 64)
    S, L = hg.stream_k(T, clusters, sl, b.cluster)
    area = T * b.cluster * b.tile_m * b.tile_n
    pad = m * n / area
    W = T - S
    per = (math.ceil(W / L) if W else 0) * sl + (S * sl / L if S else 0)   # slices on the busiest cluster
    ideal = T * sl / clusters
    return pad * ideal / per, pad, ideal / per
rows = []
for p in sys.argv[1:]:
    for r in json.load(open(p))["results"]:
        m, n, k = r["m"], r["n"], r["k"]; us = r["us"]
        if not (m > 128 and -(-k // 64) >= 96 and hg.cluster_tiles(m, n, hg.PERSISTENT) <= 33): continue
        f2, p2, w2 = fill(m, n, k, hg.PERSISTENT); fN, pN, wN = fill(m, n, k, hg.PERSISTENT_NARROW)
        ratio = us["1x1-g8-n128-s6"] / us["2x1-g8"]
        rows.append((f2 / fN, ratio, m, n, k, f2, fN, p.split("/")[-1]))
rows.sort()
for q, ratio, m, n, k, f2, fN, src in rows:
    print(f"{src:14s} {m:5d}x{n:5d}x{k:5d} fill 2x1 {f2:.2f} N {fN:.2f} ratio {q:.2f}  2x1 speed / N {ratio:.2f}")
