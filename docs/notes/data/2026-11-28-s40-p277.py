"""p277 (p274 again, the final form): edge boxes (the persistent rung loads only the rows of A / W inside the matrix, its producer a whole warp) against the same rung
before (session 39's kernel and planner, loaded beside it), with cuBLAS, in one run. A: M through one tile row at
N 3456, K 5216 (128 x 128 tiles); B: p268's 44 held-out products (default builds); C: 40 new random products over
a wider range (M 33-6000: the 128 x 256 builds too). bf16/fp16, some b = w.T; CUDA-graph replay of 40 launches,
7 alternating rounds, medians; results checked first."""
import functools, importlib.util, math, random, statistics, sys
import torch
from fullpipe.cuda import compiler
from fullpipe.kernels import hopper_gemm as hg

spec = importlib.util.spec_from_file_location("fullpipe.kernels.hopper_gemm_old", ".dev/old/hopper_gemm.py")
old = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = old
spec.loader.exec_module(old)
old._module = functools.lru_cache(maxsize=None)(
    lambda variant, arch, defines: compiler.compile_file(".dev/old/gemm_hopper_persistent.cu", arch=arch,
                                                         defines=dict(defines)))
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


def measure(m, n, k, fp16=False, wt=False, build=None):
    dt = torch.float16 if fp16 else torch.bfloat16
    a = torch.randn(m, k, device="cuda", dtype=dt)
    b = torch.randn(n, k, device="cuda", dtype=dt).T if wt else torch.randn(k, n, device="cuda", dtype=dt)
    c = torch.empty(m, n, device="cuda", dtype=dt)
    ref = a.float() @ b.float()
    kw = {"_build": build} if build else {}
    fns = {"cuBLAS": lambda: torch.matmul(a, b, out=c), "new": lambda: hg.gemm_hopper(a, b, out=c, **kw),
           "old": lambda: old.gemm_hopper(a, b, out=c, **kw)}
    for nm in ("new", "old"):
        c.fill_(float("nan")); fns[nm](); torch.cuda.synchronize()
        err = ((c.float() - ref).norm() / ref.norm()).item()
        if not err < 1e-2:
            print("WRONG", nm, m, n, k, fp16, wt, err, flush=True)
            return None
    gs = {nm: graph(fn) for nm, fn in fns.items()}
    ts = {nm: [] for nm in gs}
    for r in range(7):
        for nm in (list(gs) if r % 2 else list(gs)[::-1]):
            ts[nm].append(time_us(gs[nm]))
    del gs
    return {nm: statistics.median(v) for nm, v in ts.items()}


def table(title, shapes, build=None):
    print(f"\n{title}\n{'M x N x K':>18} {'':9} {'build':>20} {'cuBLAS us':>9} {'old us':>8} {'new us':>8} {'new/old':>7} "
          f"{'old xcB':>7} {'new xcB':>7}", flush=True)
    gains, oc, nc = [], [], []
    for m, n, k, fp16, wt in shapes:
        r = measure(m, n, k, fp16, wt, build)
        if r is None:
            continue
        bd = build or hg.default_build(m, n, k, sms)
        g = r["old"] / r["new"]
        gains.append(g); oc.append(r["cuBLAS"] / r["old"]); nc.append(r["cuBLAS"] / r["new"])
        tag = ("f16" if fp16 else "bf16") + (" w.T" if wt else "")
        print(f"{f'{m}x{n}x{k}':>18} {tag:9} {bd.label:>20} {r['cuBLAS']:>9.2f} {r['old']:>8.2f} {r['new']:>8.2f} {g:>7.3f} "
              f"{oc[-1]:>7.3f} {nc[-1]:>7.3f}", flush=True)
    gm = lambda v: math.exp(sum(map(math.log, v)) / len(v))
    print(f"geomean: new/old {gm(gains):.3f}x faster (min {min(gains):.3f}, max {max(gains):.3f}); x cuBLAS old {gm(oc):.3f} "
          f"new {gm(nc):.3f}; new slower than old by > 3% on {sum(g < 0.97 for g in gains)} of {len(gains)}", flush=True)


table("A: 128 x 128 tiles, N 3456, K 5216, M through a tile row",
      [(m, 3456, 5216, False, False) for m in (256, 257, 258, 288, 320, 321, 352, 368, 376, 383, 384)], hg.PERSISTENT_NARROW)
table("A3: small tiles and the wide build, default builds",
      [(512, 512, 4096, False, False), (1024, 1024, 1024, False, False), (256, 2048, 2048, False, False),
       (1024, 1024, 4096, False, True), (128, 4096, 4096, False, False), (192, 4096, 4096, False, False),
       (640, 640, 2048, False, False), (4096, 4096, 4096, False, False), (8192, 8192, 8192, False, False),
       (8192, 8192, 8192, True, True)])
table("A2: w.T, N through a tile column (W's rows past N), M 384, K 5216",
      [(384, n, 5216, False, True) for n in (3328, 3336, 3400, 3440, 3456)], hg.PERSISTENT_NARROW)

rng = random.Random(268)
p268 = []
while len(p268) < 44:
    m, n, k = rng.randint(33, 1100), rng.randrange(256, 8193, 8), rng.randrange(256, 12289, 8)
    if hg.default_build(m, n, k, sms).tile_n == 256:
        continue
    p268.append((m, n, k, rng.random() < 0.25, rng.random() < 0.25))
table("B: p268's 44 held-out products, default builds", p268)

rng = random.Random(274)
p274 = []
while len(p274) < 40:
    m = rng.choice([rng.randint(33, 1100), rng.randint(1100, 6000)])
    n, k = rng.randrange(256, 8193, 8), rng.randrange(256, 8193, 8)
    p274.append((m, n, k, rng.random() < 0.25, rng.random() < 0.25))
table("C: 40 new random products (M 33-6000, N and K 256-8192), default builds", p274)
