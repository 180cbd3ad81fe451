"""p400: 128 x 192 tiles for the persistent rung's unswapped product. Per product: torch; the rule
(default_build); for b = w.T: 192-wide pairs (2x1, W boxes of 96 rows) and one block a cluster;
for a row-major b: 192 one block a cluster and 1x2 (A shared). CUDA-graph replay of 20 launches,
median of 5 alternating rounds; outputs NaN-poisoned and checked against float32.
argv: 'layers', 'seed:N:COUNT', 'edges'."""
import dataclasses, json, math, os, random, statistics, sys
import torch
from fullpipe.kernels import hopper_gemm as hg

OUT = os.environ.get("OUT", "/tmp")
sms = torch.cuda.get_device_properties(0).multi_processor_count
s = torch.cuda.current_stream()
P2 = hg.PersistentBuild(tile_n=192, b_k_major=True)
P1T = hg.PersistentBuild(tile_n=192, cluster_m=1, b_k_major=True)
P1 = hg.PersistentBuild(tile_n=192, cluster_m=1)
P12 = hg.PersistentBuild(tile_n=192, cluster_m=1, cluster_n=2)
P12T = hg.PersistentBuild(tile_n=192, cluster_m=1, cluster_n=2, b_k_major=True)


def graph_of(fn, reps=20):
    st = torch.cuda.Stream(); st.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(st):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    return g


def time_all(fns, reps=20, rounds=5):
    gs = {k: graph_of(f, reps) for k, f in fns.items()}
    ts = {k: [] for k in fns}
    for _ in range(rounds):
        for k, g in gs.items():
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); g.replay(); b.record(); b.synchronize()
            ts[k].append(a.elapsed_time(b) * 1e3 / reps)
    return {k: statistics.median(v) for k, v in ts.items()}


def product(m, n, k, rows, timing=True, layouts=("w.T", "row-major")):
    torch.manual_seed(m * 7 + n + k)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    bkn = w.t().contiguous()
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    ref = (x.float() @ bkn.float())
    builds = {}
    if "w.T" in layouts:
        builds.update({"T_rule": (w.T, hg.default_build(m, n, k, sms, True)), "T_192x2": (w.T, P2),
                       "T_192x1": (w.T, P1T), "T_192_1x2": (w.T, P12T)})
    if "row-major" in layouts:
        builds.update({"R_rule": (bkn, hg.default_build(m, n, k, sms, False)), "R_192x1": (bkn, P1),
                       "R_192_1x2": (bkn, P12)})
    outs, bad = {}, {}
    for name, (b, build) in builds.items():
        o = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        hg.gemm_hopper(x, b, out=o, stream=s, _build=build)
        if build.tile_n == 192:  # and with stream-K forced off and on (every cluster), where the plan allows
            for sk in (0,):
                o2 = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                hg.gemm_hopper(x, b, out=o2, stream=s, _build=build, _sk_tiles=sk)
                outs[name + "_sk0"] = o2
        outs[name] = o
    torch.cuda.synchronize()
    for k2, o in outs.items():
        e = ((o.float() - ref).norm() / ref.norm()).item()
        if not e < 1e-2:
            bad[k2] = e
    r = {"m": m, "n": n, "k": k, "labels": {k2: v[1].label for k2, v in builds.items()}, "bad": bad}
    if timing:
        fns = {"torch": lambda: x @ bkn}
        for name, (b, build) in builds.items():
            fns[name] = (lambda b=b, build=build: hg.gemm_hopper(x, b, stream=torch.cuda.current_stream(), _build=build))
        t = time_all(fns)
        r["us"] = t
        xs = "  ".join(f"{k2} {t['torch'] / v:.3f}" for k2, v in t.items() if k2 != "torch")
        print(f"{m:5d} x {n:5d} x {k:5d}: torch {t['torch']:7.1f} us | {xs} | {r['labels'].get('T_rule')}"
              f"{' BAD ' + str(bad) if bad else ''}", flush=True)
    else:
        print(f"{m:5d} x {n:5d} x {k:5d}: {'BAD ' + str(bad) if bad else 'ok'}", flush=True)
    rows.append(r)


rows = []
for arg in sys.argv[1:]:
    if arg == "edges":  # correctness: edges in M, N, K; stream-K on and off; both layouts
        rnd = random.Random(400)
        shapes = [(1, 192, 64), (129, 200, 72), (300, 1000, 1000), (777, 385, 4160), (2048, 6144, 4096),
                  (513, 6152, 1032), (4099, 3080, 520), (64, 192 * 3 + 8, 8)]
        for _ in range(10):
            shapes.append((rnd.randint(1, 3000), rnd.randrange(8, 9000, 8), rnd.randrange(8, 9000, 8)))
        for m, n, k in shapes:
            product(m, n, k, rows, timing=False, layouts=("w.T", "row-major") if n % 8 == 0 else ("w.T",))
    elif arg == "layers":
        for n, k in ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (11008, 4096), (4096, 11008),
                     (12288, 4096), (3072, 768)):
            for m in (256, 384, 512, 640, 768, 1024, 1536, 2048, 3072, 4096):
                product(m, n, k, rows)
    else:
        _, seed, count = arg.split(":")
        rnd = random.Random(int(seed))
        for _ in range(int(count)):
            m = rnd.randint(257, 4096)
            n = rnd.randrange(1024, 16385, 64 if rnd.random() < 0.7 else 16)
            k = rnd.randrange(1024, 16385, 64 if rnd.random() < 0.7 else 16)
            product(m, n, k, rows)
    with open(os.path.join(OUT, f"p400-{arg.replace(':', '_')}.json"), "w") as fh:
        json.dump(rows, fh)
    rows_all = rows
    rows = []


def geo(v):
    return math.exp(sum(math.log(a) for a in v) / len(v)) if v else float("nan")
