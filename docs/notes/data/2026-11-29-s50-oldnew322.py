# Offline: the rule before (HEAD's hopper_gemm, copied to _old_hg_tmp) and after, on every archived all-candidate
# product: the label each rule runs (build + its stream-K against the build's old stream-K), its time x cuBLAS.
import json, glob, math, sys
sys.path.insert(0, 'src')
from fullpipe.kernels import hopper_gemm as new, _old_hg_tmp as old, skinny_gemm
files = sorted(glob.glob('docs/notes/data/2026-11-29-s49-*-p3*.json')) + ['docs/notes/data/2026-11-29-s50-c3-p322-h200.json'] + sys.argv[1:]

def label(mod, m, n, k, bt):
    if skinny_gemm.preferred(m, n, k, 132):
        return 'skinny'
    b = mod.default_build(m, n, k, 132, bt)
    sl = -(-k // 64)
    t = mod.cluster_tiles(m, n, b)
    sk_new = mod.stream_k(t, 132 // b.cluster, sl, b.cluster)[0]
    sk_old = old.stream_k(t, 132 // b.cluster, sl, b.cluster)[0]
    suffix = '' if sk_new == sk_old else ('+whole' if sk_new == 0 else ('+sk-all' if sk_new == t else '?'))
    return b.label + suffix

gm = lambda v: math.exp(sum(map(math.log, v)) / len(v))
tot = {}
for f in files:
    res = json.load(open(f))['results']
    if 'set' not in res[0]:
        continue
    o, nw, changed = [], [], []
    for r in res:
        m, n, k, us = r['m'], r['n'], r['k'], r['us']
        bt = 'w.T' in r['dtype']
        lo, ln = label(old, m, n, k, bt), label(new, m, n, k, bt)
        if lo not in us or ln not in us:
            print('  missing', f, m, n, k, lo, ln, [x for x in (lo, ln) if x not in us]); continue
        o.append(us['cuBLAS'] / us[lo]); nw.append(us['cuBLAS'] / us[ln])
        if lo != ln:
            changed.append(f"{m}x{n}x{k} {r['dtype']} {lo} -> {ln}: {us[lo] / us[ln]:.3f}x")
    name = f.split('/')[-1]
    print(f"{name:45} {len(o):3} products: x cuBLAS {gm(o):.3f} -> {gm(nw):.3f}; {len(changed)} changed")
    for c in changed:
        print('    ', c)
