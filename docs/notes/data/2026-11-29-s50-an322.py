import json, glob, math, sys
sys.path.insert(0, 'src')
from fullpipe.kernels import hopper_gemm as hg
files = sorted(glob.glob('docs/notes/data/2026-11-29-s49-*-p3*.json')) + ['docs/notes/data/2026-11-29-s50-c3-p322-h200.json']
rows = []
for f in files:
    for r in json.load(open(f))['results']:
        r['src'] = f.split('-')[-2] if 'p322' not in f else 'p322'
        rows.append(r)
print(len(rows))
W, N = '2x1-g8', '1x1-g8-n128-s6'
sms = 132
for r in rows:
    m, n, k = r['m'], r['n'], r['k']
    us = r['us']
    if W not in us or N not in us or m <= 128:
        continue
    tw = hg.cluster_tiles(m, n, hg.PERSISTENT); tn = hg.cluster_tiles(m, n, hg.PERSISTENT_NARROW)
    if 2 * tw <= 66:
        continue  # the rule's wide regime only
    ww = math.ceil(tw / 66); wn = math.ceil(tn / 132)
    eff_w = tw / (ww * 66); eff_n = tn / (wn * 132)
    ratio = us[W] / us[N]
    if ratio > 1.03 or eff_w < 0.8:
        print(f"{r['src']:5} {m:5}x{n:5}x{k:5} {r['dtype']:9} tiles w {tw:4} ({ww} waves, fill {eff_w:.2f}) n {tn:4} ({wn}, {eff_n:.2f}) "
              f"slices {math.ceil(k/64):4}  wide/narrow time {ratio:.3f}  cB/wide {us['cuBLAS']/us[W]:.3f}")
