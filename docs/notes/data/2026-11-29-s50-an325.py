import json, glob, math, sys
sys.path.insert(0, 'src')
from fullpipe.kernels import hopper_gemm as hg
files = sorted(glob.glob('docs/notes/data/2026-11-29-s49-*-p3*.json')) + ['docs/notes/data/2026-11-29-s50-c3-p322-h200.json', 'docs/notes/data/2026-11-29-s50-c4-p323-h200.json']
for f in files:
    for r in json.load(open(f))['results']:
        m, n, k, us = r['m'], r['n'], r['k'], r['us']
        if not (256 < m <= 640) or '2x1-g8' not in us:
            continue
        bt = 'w.T' in r['dtype']
        rule = hg.default_build(m, n, k, 132, bt).label
        if rule not in us: rule_t = us.get('new') or us.get(r.get('rule'))
        else: rule_t = us[rule]
        print(f"{f.split('-')[-2][:5]:5} {m:4}x{n:6}x{k:6} {r['dtype']:9} slices {math.ceil(k/64):4} wide tiles {hg.cluster_tiles(m,n,hg.PERSISTENT):4} rule {rule:22} {us['cuBLAS']/rule_t:.3f}  2x1 {us['cuBLAS']/us['2x1-g8']:.3f}  ratio {rule_t/us['2x1-g8']:.3f}")
