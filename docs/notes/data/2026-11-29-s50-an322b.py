import json, glob, math, sys
sys.path.insert(0, 'src')
from fullpipe.kernels import hopper_gemm as hg
files = sorted(glob.glob('docs/notes/data/2026-11-29-s4*-p*.json')) + ['docs/notes/data/2026-11-29-s50-c3-p322-h200.json']
seen = set()
out = []
for f in files:
    try:
        res = json.load(open(f))['results']
    except Exception:
        continue
    for r in res:
        if not isinstance(r, dict) or 'us' not in r or not isinstance(r['us'], dict):
            continue
        m, n, k = r['m'], r['n'], r['k']
        us = r['us']
        for lab, build in (('2x1-g8', hg.PERSISTENT), ('1x2-g8', hg.PERSISTENT_ALONG_N)):
            if lab not in us or lab + '+whole' not in us:
                continue
            tiles = hg.cluster_tiles(m, n, build); cl = 132 // 2; sl = math.ceil(k / 64)
            waves, rest = divmod(tiles, cl)
            if waves != 1:
                continue
            key = (m, n, k, lab, f)
            out.append((tiles * sl / cl, rest / cl, us[lab + '+whole'] / us[lab], f"{f.split('/')[-1][:30]:30} {lab} {m}x{n}x{k} tiles {tiles} slices {sl}"))
for run, rest, g, s in sorted(out):
    print(f"runs {run:6.1f} second wave {rest:.2f} sk gain {g:.3f}  {s}")
