"""p389 (from p388; hold-out of the session-57 rule, "rule", against the rule before it, "old"; random products: seed, count, M range in argv, or "layers" and a list of rows for p387's layer shapes): the transposed product in several tiles along the product's rows (swap_build(m, ..., row_tiles=2)), in
pairs along W's rows sharing x (2x1), in pairs along the product's rows sharing W (1x2), one block a cluster, and in
64-row blocks, against the rule and the one-tile transposed product, on p384's layer shapes (7-8B models, GPT-2;
the heads over 40000 rows left out) at 129-300 rows. bf16, b = w.T. CUDA-graph replay of 20 launches, 5 alternating
rounds, medians. Errors against float32 checked (NaN-poisoned outputs). Builds precompiled each in its own process
(ptxas 13.0 segfaults on some widths in clusters): those that fail are skipped. Writes p387-<rows>.json."""
import dataclasses, json, math, os, statistics, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor
import torch
from fullpipe.kernels import hopper_gemm as hg
from fullpipe.kernels._operands import operand

sms = torch.cuda.get_device_properties(0).multi_processor_count
import random
LAYERS = [(4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096), (4096, 12288), (4096, 22016), (11008, 4096),
          (3584, 4608), (3584, 3584), (3584, 37888), (18944, 3584), (3072, 9216), (3072, 16384), (8192, 3072),
          (768, 2304), (768, 768), (768, 3072), (3072, 768)]
PRODUCTS = []
if sys.argv[1] == "layers":
    SEED = "layers-" + sys.argv[2].replace(",", "-")
    PRODUCTS = [(m, n, k) for m in map(int, sys.argv[2].split(",")) for k, n in LAYERS]
    COUNT = len(PRODUCTS)
else:
    SEED, COUNT, MLO, MHI = (int(x) for x in sys.argv[1:5])
    rng = random.Random(SEED)
while len(PRODUCTS) < COUNT:
    m = rng.randint(MLO, MHI)
    n = rng.choice([rng.randint(16, 128), rng.randint(128, 1024), rng.randint(128, 1024), rng.randint(1024, 4096)]) * 8
    k = rng.choice([rng.randint(96, 512), rng.randint(512, 2048), rng.randint(384, 1024)]) * 8
    if len(sys.argv) > 5:  # (N and K ranges: N a multiple of 8, K of 16)
        nlo, nhi, klo, khi = (int(x) for x in sys.argv[5:9])
        kstep = int(sys.argv[9]) if len(sys.argv) > 9 else 16
        n, k = rng.randint(nlo // 8, nhi // 8) * 8, rng.randint(klo // kstep, khi // kstep) * kstep
    if m * n * k * 2 / 1e12 > 0.4:  # (keep each product under ~1 ms)
        continue
    if os.environ.get("P389_KEEP") == "fill":  # (only products the fill branch takes: 128-row blocks, one a cluster)
        b = hg.default_build(m, n, k, sms, True)
        if not (b.swap_ab and b.cluster == 1 and b.tile_m == 128):
            continue
    PRODUCTS.append((m, n, k))


def old_build(m, n, k):
    """default_build before session 57: the transposed product at 65-256 rows only, its 64-row blocks at most half
    as many as SMs."""
    un = hg.unswapped_build(m, n, k, sms, True)
    if 64 < m <= 256 and hg._swap_pays(m, n, k, sms, un):
        return hg.swap_build(m)
    slices, blocks = -(-k // 64), -(-n // 64)
    if (64 < m <= hg.SWAP_SMALL_MAX_ROWS and hg.rows_on_sectors(n, k, True) and slices >= hg.SWAP_SMALL_MIN_SLICES
            and un in hg.SMALLER_BUILDS and hg._saves_padding(hg.swap_build(m, 64, 1), m)
            and hg.SWAP_SMALL_MIN_BLOCKS <= blocks and 2 * blocks <= sms
            and blocks * slices >= hg.SWAP_SMALL_MIN_SLICES_PER_SM * sms):
        return hg.swap_build(m, 64, 1)
    return un


def variants(m):
    v = {}
    t0 = -(-m // 256)
    for t in (t0, t0 + 1):
        if -(-m // t) < 80:
            continue
        v[f"one{t}"] = hg.swap_build(m, 128, 1, t)
        v[f"r64_{t}"] = hg.swap_build(m, 64, 1, t)
        if t == t0:
            v[f"pair{t}"] = hg.swap_build(m, 128, 2, t)
    return v


def compile_ok(b):
    code = ("import sys, json; from fullpipe.kernels import hopper_gemm as hg; "
            "hg.module('persistent', 'sm_90a', build=hg.PersistentBuild(**json.loads(sys.argv[1]))); print('OK')")
    try:
        r = subprocess.run([sys.executable, "-c", code, json.dumps(dataclasses.asdict(b))], capture_output=True,
                           text=True, timeout=300)
        return r.returncode == 0 and "OK" in r.stdout
    except subprocess.TimeoutExpired:
        return False


t0 = time.perf_counter()
todo = {b for m, _, _ in PRODUCTS for b in variants(m).values()}
with ThreadPoolExecutor(14) as ex:
    ok = dict(zip(todo, ex.map(compile_ok, todo)))
bad = sorted(b.label for b, good in ok.items() if not good)
print(f"compiled {len(todo)} builds in {time.perf_counter() - t0:.0f} s; failed: {bad}", flush=True)


def graph(fn, n=20):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    g.replay(); torch.cuda.synchronize()
    return g


def time_us(g, n=20):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); g.replay(); b.record(); b.synchronize()
    return a.elapsed_time(b) / n * 1e3


results = []
for m, n, k in PRODUCTS:
    if True:
        if True:
            model = "random"
            dt = torch.bfloat16
            a = torch.randn(m, k, device="cuda", dtype=dt)
            w = torch.randn(n, k, device="cuda", dtype=dt)
            b = w.T
            c = torch.empty(m, n, device="cuda", dtype=dt)
            ref = a.float() @ b.float()
            A, B = operand(a, "a"), operand(b, "b", transposed_ok=True)
            cur = torch.cuda.current_stream
            builds = {"rule": hg.default_build(m, n, k, sms, True), "old": old_build(m, n, k)}
            builds.update({nm: bd for nm, bd in variants(m).items() if ok[bd]})
            fns = {"cuBLAS": lambda: torch.nn.functional.linear(a, w)}
            for nm, bd in builds.items():
                fns[nm] = (lambda bd=bd: hg.run(A, B, "persistent", c, cur(), build=bd))
            errs = {}
            for nm in [x for x in fns if x != "cuBLAS"]:
                c.fill_(float("nan")); fns[nm](); torch.cuda.synchronize()
                err = ((c.float() - ref).norm() / ref.norm()).item()
                errs[nm] = err
                if not err < 1e-2:
                    print("WRONG", nm, builds[nm].label, m, n, k, err, flush=True)
                    del fns[nm]
            gs = {nm: graph(fn) for nm, fn in fns.items()}
            ts = {nm: [] for nm in gs}
            for r in range(5):
                for nm in (list(gs) if r % 2 else list(gs)[::-1]):
                    ts[nm].append(time_us(gs[nm]))
            del gs
            med = {nm: statistics.median(v) for nm, v in ts.items()}
            labels = {nm: bd.label for nm, bd in builds.items()}
            results.append(dict(model=model, m=m, n=n, k=k, labels=labels, us=med, err=errs))
            best = min((x for x in med if x != "cuBLAS"), key=med.get)
            xs = " ".join(f"{nm} {med['cuBLAS'] / med[nm]:.2f}" for nm in med if nm != "cuBLAS")
            print(f"{model:9s} {f'{m}x{n}x{k}':>16} cuBLAS {med['cuBLAS']:6.1f} us | {xs} | best {best} "
                  f"({labels[best]}) {med['rule'] / med[best]:.2f}x rule", flush=True)
gm = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")
for lo, hi in ((65, 128), (129, 256), (257, 512), (513, 4096)):
    rs = [r for r in results if lo <= r["m"] <= hi]
    m = f"{lo}-{hi} ({len(rs)})"
    names = sorted({nm for r in rs for nm in r["us"] if nm != "cuBLAS"})
    line = " ".join(f"{nm} {gm([r['us']['cuBLAS'] / r['us'][nm] for r in rs if nm in r['us']]):.3f}" for nm in names)
    bestv = gm([r["us"]["cuBLAS"] / min(v for x, v in r["us"].items() if x != "cuBLAS") for r in rs])
    ch = [r["us"]["old"] / r["us"]["rule"] for r in rs if r["labels"]["old"] != r["labels"]["rule"]]
    print(f"SUMMARY M={m}: x cuBLAS gm: {line}; best of all {bestv:.3f}; changed {len(ch)}: rule/old gm {gm(ch):.3f}, "
          f"slower >3% {sum(c < 0.97 for c in ch)}")
print(f"total {time.perf_counter() - t0:.1f} s")
json.dump(dict(sms=sms, gpu=torch.cuda.get_device_name(0), results=results),
          open(os.environ.get("OUT", ".") + f"/p389-{SEED}.json", "w"), indent=1)
