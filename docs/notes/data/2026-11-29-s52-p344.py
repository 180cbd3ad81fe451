"""p344: held-out test of a floor on the K slices of a tile split below one wave (one-block clusters), proposed from
p340: tiles of 32 slices split in 2 ran 1.07-1.42x slower than whole on every one-block build (7 products), tiles of
64+ slices split faster (0.61-0.87). Proposed: no split below one wave for tiles of fewer than 40 slices.
40 random products (seed 344) whose rule plan splits one-block tiles below one wave with 32-39 slices, M 65-1024,
N 256-8192, K 1992-2496, 70 % w.T, 25 % fp16; 12 more at 40-63 slices (not changed: the boundary's other side).
Per product: the rule's build split (stream-K, as now) and whole, CUDA-graph replay of 20 launches (5 alternating
rounds, medians), and an eager loop of 300 calls (host included) each. Writes p344.json."""
import dataclasses, json, math, os, random, statistics, time
import torch
from fullpipe.kernels import hopper_gemm as hg
from fullpipe.kernels._operands import operand

sms = torch.cuda.get_device_properties(0).multi_processor_count
rng = random.Random(int(os.environ.get("P344_SEED", 344)))


def pick(lo_slices, hi_slices, count):
    out = []
    while len(out) < count:
        m, n = rng.randint(65, 1024), rng.randrange(256, 8193)
        k = rng.randrange(lo_slices * 64 - 56, hi_slices * 64 + 1, 8)
        wt, fp16 = rng.random() < 0.7, rng.random() < 0.25
        if not wt:
            n = -(-n // 8) * 8
        b = hg.default_build(m, n, k, sms, wt)
        if b.cluster != 1:
            continue
        tiles, slices = hg.cluster_tiles(m, n, b), -(-k // 64)
        sk, launched = hg.stream_k(tiles, sms // b.cluster, slices, b.cluster)
        if not (sk and tiles < sms and lo_slices <= slices <= hi_slices):
            continue
        out.append((m, n, k, fp16, wt))
    return out


shapes = [("changed", s) for s in pick(32, 39, int(os.environ.get("P344_N", 40)))]
shapes += [("control", s) for s in pick(40, 63, 12)]


def graph(fn, n=20):
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
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


def eager_us(fn, n=300):
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e6 / n


results = []
for group, (m, n, k, fp16, wt) in shapes:
    dt = torch.float16 if fp16 else torch.bfloat16
    a = torch.randn(m, k, device="cuda", dtype=dt)
    b = torch.randn(n, k, device="cuda", dtype=dt).T if wt else torch.randn(k, n, device="cuda", dtype=dt)
    pitch = -(-n // 8) * 8
    c = torch.empty(m, pitch, device="cuda", dtype=dt)[:, :n]
    ref = a.float() @ b.float()
    A, B = operand(a, "a"), operand(b, "b", transposed_ok=True)
    build = hg.default_build(m, n, k, sms, wt)
    cur = torch.cuda.current_stream
    fns = {"split": lambda: hg.run(A, B, "persistent", c, cur(), build=build),
           "whole": lambda: hg.run(A, B, "persistent", c, cur(), build=build, sk_tiles=0)}
    for nm, fn in fns.items():
        c.fill_(float("nan")); fn(); torch.cuda.synchronize()
        err = ((c.float() - ref).norm() / ref.norm()).item()
        assert err < 1e-2, (nm, m, n, k, err)
    gs = {nm: graph(fn) for nm, fn in fns.items()}
    ts = {nm: [] for nm in gs}
    for r in range(5):
        for nm in (list(gs) if r % 2 else list(gs)[::-1]):
            ts[nm].append(time_us(gs[nm]))
    del gs
    med = {nm: statistics.median(v) for nm, v in ts.items()}
    eg = {nm: eager_us(fn) for nm, fn in fns.items()}
    tiles, slices = hg.cluster_tiles(m, n, build), -(-k // 64)
    sk, launched = hg.stream_k(tiles, sms // build.cluster, slices, build.cluster)
    results.append(dict(group=group, m=m, n=n, k=k, fp16=fp16, wt=wt, build=build.label, tiles=tiles, slices=slices,
                        split=launched // max(1, tiles), graph_us=med, eager_us=eg))
    print(f"{group:8s} {f'{m}x{n}x{k}':>15} {'f16' if fp16 else 'bf16'} {'w.T' if wt else 'B  '} {build.label:22s} "
          f"tiles {tiles:3d} slices {slices:3d} split {launched // max(1, tiles)}  graph split {med['split']:6.1f} whole "
          f"{med['whole']:6.1f} ({med['split'] / med['whole']:.2f}x)  eager split {eg['split']:6.1f} whole {eg['whole']:6.1f} "
          f"({eg['split'] / eg['whole']:.2f}x)", flush=True)
json.dump(results, open(os.path.join(os.environ.get("OUT", "."), "p344.json"), "w"), indent=1)
gm = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")
for g in ("changed", "control"):
    rs = [r for r in results if r["group"] == g]
    if not rs:
        continue
    gr = [r["graph_us"]["split"] / r["graph_us"]["whole"] for r in rs]
    eg = [r["eager_us"]["split"] / r["eager_us"]["whole"] for r in rs]
    print(f"RESULT {g}: {len(rs)} products; whole / split speed, geometric mean: graph {gm(gr):.3f} (min {min(gr):.2f}, "
          f"max {max(gr):.2f}, {sum(x < 0.97 for x in gr)} slower by >3 %), eager {gm(eg):.3f} (min {min(eg):.2f})")
