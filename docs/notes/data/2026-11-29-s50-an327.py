# One row of 2 x 1 clusters (129-256 rows): the current rule's build against 2x1-g8 (rule sk) and 2x1-g8+sk-all, by sectors.
import json, glob, math, sys
sys.path.insert(0, 'src')
from fullpipe.kernels import hopper_gemm as hg
files = sorted(glob.glob('docs/notes/data/2026-11-29-s49-*-p3*.json')) + ['docs/notes/data/2026-11-29-s50-c3-p322-h200.json', 'docs/notes/data/2026-11-29-s50-c4-p323-h200.json', 'docs/notes/data/2026-11-29-s50-c7-p326-h200.json']
rows = []
for f in files:
    for r in json.load(open(f))['results']:
        m, n, k, us = r['m'], r['n'], r['k'], r['us']
        if not (128 < m <= 256) or '2x1-g8' not in us:
            continue
        bt = 'w.T' in r['dtype']
        b = hg.default_build(m, n, k, 132, bt)
        rule = 'new' if 'new' in us else b.label
        if rule not in us:
            continue
        on = hg.rows_on_sectors(n, k, bt)
        tiles = hg.cluster_tiles(m, n, hg.PERSISTENT)
        sl = math.ceil(k / 64)
        if b.label == '2x1-g8':
            continue
        w = min(us['2x1-g8'], us.get('2x1-g8+sk-all', 1e9))
        rows.append((on, sl, tiles, f"{f.split('/')[-1][:22]:22} {m:4}x{n:5}x{k:5} {r['dtype']:9} {'on ' if on else 'off'} sl {sl:4} tiles {tiles:3} rule {b.label:20} {us['cuBLAS']/us[rule]:.3f} 2x1 {us['cuBLAS']/us['2x1-g8']:.3f} best-wide {us['cuBLAS']/w:.3f} wide/rule {us[rule]/us['2x1-g8']:.3f}"))
for on, sl, t, s in sorted(rows):
    if sl >= 40:
        print(s)
