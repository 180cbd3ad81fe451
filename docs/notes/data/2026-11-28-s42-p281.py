"""p281: below a full wave, does stream-K over every SM (sk_tiles = all tiles, runs cut evenly over all clusters)
beat the persistent rung's default plan (whole tiles, busy share < 0.8)? p268's and p274's held-out shapes whose
default plan leaves > 20 % of the SMs idle, bf16, row-major B. Configs: default plan; the default build with full
stream-K; 128 x 128 tiles with full stream-K; 128 x 256 tiles (clusters of 2 above 128 rows) with full stream-K.
CUDA-graph replay of 40, 7 alternating rounds, medians; every result checked against fp32 first."""
import math, statistics, sys
import torch
import importlib.util, os
_spec = importlib.util.spec_from_file_location("p281_select", os.path.join(os.path.dirname(__file__), "2026-11-28-s42-p281_select.py"))
_sel = importlib.util.module_from_spec(_spec); _spec.loader.exec_module(_sel)
shapes, busy = _sel.shapes, _sel.busy
from fullpipe.kernels import hopper_gemm as hg

sms = torch.cuda.get_device_properties(0).multi_processor_count


def graph(fn, n=40):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    g.replay(); torch.cuda.synchronize()
    return g


def time_us(g, n=40):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); g.replay(); b.record(); b.synchronize()
    return a.elapsed_time(b) / n * 1e3


def configs(m, n, k):
    d = hg.default_build(m, n, k, sms)
    wide = hg.PERSISTENT_ONE_ROW if m <= hg.BM else hg.PERSISTENT
    out = {"default": (d, None)}
    for name, b in (("d+sk", d), ("n128+sk", hg.PERSISTENT_NARROW), ("n256+sk", wide)):
        t = hg.cluster_tiles(m, n, b)
        clusters = sms // b.cluster
        if t * -(-k // 64) >= 4 * clusters:
            out[name] = (b, t)
    return out


names = ["cuBLAS", "default", "d+sk", "n128+sk", "n256+sk"]
print(f"{'M x N x K':>17} {'default build':>20} {'busy':>5} | x cuBLAS: " + " ".join(f"{x:>8}" for x in names[1:]) + f" {'cuBLAS us':>9}", flush=True)
ratios = {x: [] for x in names[1:]}
best_gain = []
for m, n, k, _, _ in shapes():
    d = hg.default_build(m, n, k, sms)
    u = busy(m, n, k, d)[0]
    if u >= 0.8:
        continue
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    fns = {"cuBLAS": lambda: torch.matmul(a, b, out=c)}
    for name, (bd, skt) in configs(m, n, k).items():
        fn = (lambda bd=bd, skt=skt: hg.gemm_hopper(a, b, out=c, _build=bd, _sk_tiles=skt))
        c.fill_(float("nan")); fn(); torch.cuda.synchronize()
        err = ((c.float() - ref).norm() / ref.norm()).item()
        if not err < 1e-2:
            print("WRONG", name, m, n, k, err, flush=True)
            continue
        fns[name] = fn
    gs = {nm: graph(fn) for nm, fn in fns.items()}
    ts = {nm: [] for nm in gs}
    for r in range(7):
        for nm in (list(gs) if r % 2 else list(gs)[::-1]):
            ts[nm].append(time_us(gs[nm]))
    med = {nm: statistics.median(v) for nm, v in ts.items()}
    del gs
    row = []
    for x in names[1:]:
        if x in med:
            ratios[x].append(med["cuBLAS"] / med[x]) if x == "default" else None
            row.append(f"{med['cuBLAS'] / med[x]:>8.3f}")
        else:
            row.append(f"{'-':>8}")
    best = min(med[x] for x in med if x != "cuBLAS")
    best_gain.append((med["default"] / best, med["cuBLAS"] / best))
    print(f"{f'{m}x{n}x{k}':>17} {d.label:>20} {u:>5.2f} |           " + " ".join(row) + f" {med['cuBLAS']:>9.2f}", flush=True)
gm = lambda v: math.exp(sum(map(math.log, v)) / len(v))
print(f"geomean x cuBLAS: default {gm(ratios['default']):.3f}; best of the four {gm([g[1] for g in best_gain]):.3f} "
      f"(best / default {gm([g[0] for g in best_gain]):.3f}x) over {len(best_gain)} shapes", flush=True)
