"""p309: 128 x 256 tiles in clusters of 2 along M (the rule's build above 128 rows) at one wave and
below: every tile dealt out as K runs over every cluster ("all") against whole tiles ("none") and the
rule's plan, on 60 fresh random products (seed 309) whose cluster tiles number 34-100 on 66 clusters:
M 129-1100, N chosen for the tile count, K 1024-12288 (a quarter fp16, a quarter b = w.T). cuBLAS beside.
CUDA-graph replay of 20 launches, 5 alternating rounds, medians. Tests session 49's reading of p308:
below one wave with a third of the clusters idle, and at one wave and up to ~0.45 of a second, "all" wins."""
import json, math, os, random, statistics
import torch
from fullpipe.kernels import gemm_tuning as gt, hopper_gemm as hg
from fullpipe.kernels._operands import operand

sms = torch.cuda.get_device_properties(0).multi_processor_count
clusters = sms // 2
rng = random.Random(309)
shapes = []
while len(shapes) < 60:
    m = rng.randint(129, 1100)
    rows = -(-m // 256)
    want = rng.randint(34, 100)
    cols = max(1, round(want / rows))
    n = rng.randrange(max(256, (cols - 1) * 256 + 8), cols * 256 + 1, 8)
    k = rng.randrange(1024, 12289, 8)
    tiles = hg.cluster_tiles(m, n, hg.PERSISTENT)
    if not 34 <= tiles <= 100 or hg.default_build(m, n, k, sms) != hg.PERSISTENT:
        continue
    shapes.append((m, n, k, rng.random() < 0.25, rng.random() < 0.25))
LAUNCHES = 20


def graph(fn, n=LAUNCHES):
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


def time_us(g, n=LAUNCHES):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); g.replay(); b.record(); b.synchronize()
    return a.elapsed_time(b) / n * 1e3


results = []
for m, n, k, fp16, wt in shapes:
    dt = torch.float16 if fp16 else torch.bfloat16
    a = torch.randn(m, k, device="cuda", dtype=dt)
    b = torch.randn(n, k, device="cuda", dtype=dt).T if wt else torch.randn(k, n, device="cuda", dtype=dt)
    c = torch.empty(m, n, device="cuda", dtype=dt)
    ref = a.float() @ b.float()
    A, B = operand(a, "a"), operand(b, "b", transposed_ok=True)
    plans = {"rule": gt.rule_plan(m, n, k, sms), "none": gt.GemmPlan("persistent", hg.PERSISTENT, "none"),
             "all": gt.GemmPlan("persistent", hg.PERSISTENT, "all")}
    fns = {"cuBLAS": lambda: torch.matmul(a, b, out=c)}
    for nm, p in plans.items():
        fns[nm] = (lambda p=p: gt.run_plan(p, A, B, c, torch.cuda.current_stream()))
        c.fill_(float("nan")); fns[nm](); torch.cuda.synchronize()
        err = ((c.float() - ref).norm() / ref.norm()).item()
        assert err < 1e-2, (nm, m, n, k, err)
    gs = {nm: graph(fn) for nm, fn in fns.items()}
    ts = {nm: [] for nm in gs}
    for r in range(5):
        for nm in (list(gs) if r % 2 else list(gs)[::-1]):
            ts[nm].append(time_us(gs[nm]))
    del gs
    med = {nm: statistics.median(v) for nm, v in ts.items()}
    tiles = hg.cluster_tiles(m, n, hg.PERSISTENT)
    slices = -(-k // 64)
    row = dict(m=m, n=n, k=k, dtype=("f16" if fp16 else "bf16") + (" w.T" if wt else ""), tiles=tiles, slices=slices,
               rule_sk=hg.stream_k(tiles, clusters, slices, 2)[0], us=med)
    results.append(row)
    print(f"{f'{m}x{n}x{k}':>18} {row['dtype']:9} tiles {tiles:3d} ({tiles / clusters:.2f} waves) slices {slices:3d} "
          f"rule-sk {row['rule_sk']:3d}  all/none {med['none'] / med['all']:.3f}  xcB none {med['cuBLAS'] / med['none']:.3f} "
          f"all {med['cuBLAS'] / med['all']:.3f} rule {med['cuBLAS'] / med['rule']:.3f}", flush=True)
out = os.environ.get("OUT", ".")
json.dump(dict(sms=sms, gpu=torch.cuda.get_device_name(0), results=results), open(f"{out}/p309.json", "w"), indent=1)
