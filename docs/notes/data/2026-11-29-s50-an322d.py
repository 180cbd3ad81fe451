# NARROW_RATE's basis: rows on the sectors, more than 128 rows, 66+ cluster tiles of 128 x 256, both builds filling
# their waves more than 90 % as whole tiles: time of 128 x 256 (2x1-g8) / time of 128 x 128 (1x1-g8-n128-s6).
import json, glob, math, statistics, sys
sys.path.insert(0, 'src')
from fullpipe.kernels import hopper_gemm as hg
files = sorted(glob.glob('docs/notes/data/2026-11-29-s49-*-p3*.json')) + ['docs/notes/data/2026-11-29-s50-c3-p322-h200.json']
full = []
for f in files:
    for r in json.load(open(f))['results']:
        m, n, k, us = r['m'], r['n'], r['k'], r['us']
        W, N = '2x1-g8', '1x1-g8-n128-s6'
        if m <= 128 or W not in us or N not in us or not hg.rows_on_sectors(n, k, 'w.T' in r['dtype']):
            continue
        tw, tn = hg.cluster_tiles(m, n, hg.PERSISTENT), hg.cluster_tiles(m, n, hg.PERSISTENT_NARROW)
        if tw >= 66 and tw / (math.ceil(tw / 66) * 66) > 0.9 and tn / (math.ceil(tn / 132) * 132) > 0.9:
            full.append(us[W] / us[N])
print(len(full), "products, median", round(statistics.median(full), 3), "range", round(min(full), 3), round(max(full), 3))
