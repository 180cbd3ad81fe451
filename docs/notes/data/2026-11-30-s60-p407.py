"""p407 (session 60): the transposed product in 64-row blocks of W in pairs along W's rows sharing x's slice
(new: 2x1-m64, as cuBLAS's nvjet 64x152 2x1 at 300 tokens), and 128-row blocks in pairs along the product's rows
sharing W's slice (1x2), against the rule and cuBLAS. CUDA-graph replay of 20 launches, median of 5 alternating
rounds; outputs NaN-poisoned and checked against float32. argv: 'layers' | 'seed:N:COUNT'."""
import json, os, random, statistics, sys
from concurrent.futures import ThreadPoolExecutor
import torch
from fullpipe.kernels import hopper_gemm as hg

OUT = os.environ.get("OUT", "/tmp")
sms = torch.cuda.get_device_properties(0).multi_processor_count
s = torch.cuda.current_stream()


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


def variants(m, n, k, b_t):
    t = hg.swap_row_tiles(m)
    v = {"rule": hg.default_build(m, n, k, sms, b_t), "m64_t": hg.swap_build(m, 64, 1, t)}
    for rows in (t, t + 1):
        if 64 * rows < m or rows == t:
            try:
                v[f"m64P_t{rows - t or ''}"] = hg.swap_build(m, 64, 2, rows)
            except ValueError:
                pass
    if b_t:
        v["m128N_t"] = hg.swap_build(m, 128, 1, t, cluster_n=2)
        if 64 * (t + 1) < m:
            v["m128N_t1"] = hg.swap_build(m, 128, 1, t + 1, cluster_n=2)
    return {k2: hg.as_laid_out(b, b_t) for k2, b in v.items()}


def product(m, n, k, layouts=("w.T", "row-major")):
    torch.manual_seed(m * 7 + n + k)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    bkn = w.t().contiguous()
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    ref = x.float() @ bkn.float()
    r = {"m": m, "n": n, "k": k}
    for layout in layouts:
        b = w.T if layout == "w.T" else bkn
        builds = variants(m, n, k, layout == "w.T")
        bad = {}
        for name, build in builds.items():
            for sk in (None, 0):
                o = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                hg.gemm_hopper(x, b, out=o, stream=s, _build=build, _sk_tiles=sk)
                torch.cuda.synchronize()
                e = ((o.float() - ref).norm() / ref.norm()).item()
                if not e < 1e-2:
                    bad[f"{name}/sk{sk}"] = e
        fns = {"torch": lambda: x @ bkn}
        for name, build in builds.items():
            fns[name] = (lambda b=b, build=build: hg.gemm_hopper(x, b, stream=torch.cuda.current_stream(), _build=build))
        t = time_all(fns)
        r[layout] = {"us": t, "labels": {k2: v.label for k2, v in builds.items()}, "bad": bad}
        xs = "  ".join(f"{k2} {t['torch'] / v:.3f}" for k2, v in t.items() if k2 != "torch")
        print(f"{layout:9s} {m:5d} x {n:5d} x {k:5d}: torch {t['torch']:7.1f} us | {xs} | {builds['rule'].label}"
              f"{' BAD ' + str(bad) if bad else ''}", flush=True)
    return r


def shapes(arg):
    if arg == "layers":
        llama = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)]
        qwen = [(4608, 3584), (3584, 3584), (37888, 3584), (3584, 18944)]
        return ([(m, n, k) for m in (129, 200, 300, 400, 512, 768) for n, k in llama]
                + [(m, n, k) for m in (300, 512) for n, k in qwen])
    _, seed, count = arg.split(":")
    rng = random.Random(int(seed))
    return [(rng.randint(65, 1024), 8 * rng.randint(64, 4096), 64 * rng.randint(8, 256)) for _ in range(int(count))]


arg = sys.argv[1]
todo = shapes(arg)
builds = {(bb, lay) for m, n, k in todo for lay in (True, False) for bb in variants(m, n, k, lay).values()}
with ThreadPoolExecutor(8) as pool:
    list(pool.map(lambda b: hg.module("persistent", "sm_90a", build=b[0]), builds))
print(f"{len(builds)} builds compiled", flush=True)
rows = [product(*shp) for shp in todo]
json.dump(rows, open(f"{OUT}/p407-{arg.replace(':', '-')}.json", "w"), indent=1)
geo = statistics.geometric_mean
for layout in ("w.T", "row-major"):
    for name in ("rule", "m64_t", "m64P_t", "m64P_t1", "m128N_t", "m128N_t1"):
        v = [r[layout]["us"]["torch"] / r[layout]["us"][name] for r in rows if name in r[layout]["us"]]
        best = [r[layout]["us"]["torch"] / min(u for k2, u in r[layout]["us"].items() if k2 != "torch") for r in rows]
        if v:
            print(f"{arg} {layout:9s} {name:9s} x torch geomean {geo(v):.3f} over {len(v)}; best of all {geo(best):.3f}")
