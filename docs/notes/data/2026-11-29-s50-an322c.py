# A 128 x 128 tile's rate against a 128 x 256 one's where both fill their last wave nearly full (rows on sectors).
import json, glob, math, sys
sys.path.insert(0, 'src')
from fullpipe.kernels import hopper_gemm as hg
files = sorted(glob.glob('docs/notes/data/2026-11-29-s49-*-p3*.json')) + ['docs/notes/data/2026-11-29-s50-c3-p322-h200.json']
for f in files:
    for r in json.load(open(f))['results']:
        m, n, k, us = r['m'], r['n'], r['k'], r['us']
        bt = 'w.T' in r['dtype']
        W, N = '2x1-g8', '1x1-g8-n128-s6'
        if m <= 128 or W not in us or N not in us:
            continue
        tw = hg.cluster_tiles(m, n, hg.PERSISTENT); tn = hg.cluster_tiles(m, n, hg.PERSISTENT_NARROW)
        fw = tw / (math.ceil(tw / 66) * 66); fn = tn / (math.ceil(tn / 132) * 132)
        skw = hg.stream_k(tw, 66, math.ceil(k/64), 2)[0]; skn = hg.stream_k(tn, 132, math.ceil(k/64), 1)[0]
        if (fw > 0.9 or skw) and (fn > 0.9 or skn) and tw >= 66:
            print(f"{f.split('-')[-2]:5} {m:5}x{n:5}x{k:5} {r['dtype']:9} sectors {hg.rows_on_sectors(n,k,bt)!s:5} fill w {fw:.2f}{'sk' if skw else '  '} n {fn:.2f}{'sk' if skn else '  '} narrow rate {us[W]/us[N]:.3f}")
