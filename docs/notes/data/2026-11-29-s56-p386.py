"""p386: at 65-128 rows, where gemm(variant="hopper") runs the skinny kernel (skinny_gemm.preferred: few 128-column
tiles, K > 1536), the skinny kernel against default_build's persistent build (the transposed product where it takes
it) and cuBLAS: p380's layer shapes at 72, 100 and 120 rows where skinny is preferred, and random products (seed
argv[1], count argv[2]) of 65-128 rows, N 1024-8448, K 1552-16384 (multiples of 16: rows on the sectors), w.T.
CUDA-graph replay of 20 launches, 5 alternating rounds, medians; errors against float32. Writes p386.json."""
import json, math, os, random, statistics, sys, time
import torch
from fullpipe.kernels import hopper_gemm as hg, skinny_gemm as sk, gemm_tuning as gt
from fullpipe.kernels._operands import operand

sms = torch.cuda.get_device_properties(0).multi_processor_count
LAYERS = [(4096, 6144), (4096, 4096), (14336, 4096), (11008, 4096), (3584, 4608), (3584, 3584), (18944, 3584),
          (3072, 9216), (8192, 3072), (3072, 2304), (3072, 768)]
shapes = [(m, n, k, "layer") for m in (72, 100, 120) for k, n in LAYERS if sk.preferred(m, n, k, sms)]
rng = random.Random(int(sys.argv[1]))
while len(shapes) < len([s for s in shapes if s[3] == "layer"]) + int(sys.argv[2]):
    m, n, k = rng.randint(65, 128), rng.randrange(1024, 8449, 8), rng.randrange(1552, 16385, 16)
    if sk.preferred(m, n, k, sms):
        shapes.append((m, n, k, "random"))


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
t0 = time.perf_counter()
for m, n, k, kind in shapes:
    dt = torch.bfloat16
    a = torch.randn(m, k, device="cuda", dtype=dt)
    w = torch.randn(n, k, device="cuda", dtype=dt)
    b = w.T
    c = torch.empty(m, n, device="cuda", dtype=dt)
    ref = a.float() @ b.float()
    A, B = operand(a, "a"), operand(b, "b", transposed_ok=True)
    cur = torch.cuda.current_stream
    fns = {"cuBLAS": lambda: torch.nn.functional.linear(a, w),
           "skinny": lambda: gt.run_plan(gt.GemmPlan("skinny"), A, B, c, cur()),
           "new": lambda: hg.run(A, B, "persistent", c, cur()),
           "swap64": lambda: hg.run(A, B, "persistent", c, cur(), build=hg.swap_build(m, 64, 1)),
           "swap128x2": lambda: hg.run(A, B, "persistent", c, cur(), build=hg.swap_build(m))}
    for nm in [x for x in fns if x != "cuBLAS"]:
        c.fill_(float("nan")); fns[nm](); torch.cuda.synchronize()
        err = ((c.float() - ref).norm() / ref.norm()).item()
        if not err < 1e-2:
            print("WRONG", nm, m, n, k, err, flush=True)
            del fns[nm]
    gs = {nm: graph(fn) for nm, fn in fns.items()}
    ts = {nm: [] for nm in gs}
    for r in range(5):
        for nm in (list(gs) if r % 2 else list(gs)[::-1]):
            ts[nm].append(time_us(gs[nm]))
    del gs
    med = {nm: statistics.median(v) for nm, v in ts.items()}
    rule = hg.default_build(m, n, k, sms, True)
    results.append(dict(m=m, n=n, k=k, kind=kind, rule=rule.label, us=med))
    xs = "  ".join(f"{nm} {med['cuBLAS'] / med[nm]:.3f}" for nm in med if nm != "cuBLAS")
    print(f"{kind:6s} {f'{m}x{n}x{k}':>16} cuBLAS {med['cuBLAS']:6.1f} us  x cuBLAS: {xs}  (rule {rule.label})", flush=True)
gm = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")
for kind in ("layer", "random"):
    rs = [r for r in results if r["kind"] == kind]
    line = ", ".join(f"{nm} {gm([r['us']['cuBLAS'] / r['us'][nm] for r in rs if nm in r['us']]):.3f}"
                     for nm in ("skinny", "new", "swap64", "swap128x2"))
    best = [min(r["us"][nm] for nm in ("new", "swap64", "swap128x2") if nm in r["us"]) for r in rs]
    print(f"SUMMARY {kind} ({len(rs)}): x cuBLAS gm {line}; best persistent / skinny "
          f"{gm([r['us']['skinny'] / b for r, b in zip(rs, best)]):.3f}")
print(f"total {time.perf_counter() - t0:.1f} s")
json.dump(dict(sms=sms, gpu=torch.cuda.get_device_name(0), results=results),
          open(os.environ.get("OUT", ".") + "/p386.json", "w"), indent=1)
