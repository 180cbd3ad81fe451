"""p410 (session 60): tune_gemm with the session's new candidates (64-row pairs sharing x's slice, 128-row pairs
sharing W's, the 128-row blocks in t..t+2 row tiles), then gemm(variant="hopper") with the remembered plan against
the rule's build and torch, timed apart from the tuner (CUDA-graph replay of 20 launches, median of 5 alternating
rounds). argv: 'found' (p407's shapes where a new build won) | 'seed:N:COUNT'."""
import os, random, statistics, sys
from concurrent.futures import ThreadPoolExecutor
import torch
from fullpipe.kernels import gemm, tune_gemm, gemm_tuning as gt, hopper_gemm as hg

os.environ.setdefault("FULLPIPE_GEMM_TUNING_FILE", os.path.join(os.environ.get("OUT", "/tmp"), "plans.json"))
sms = torch.cuda.get_device_properties(0).multi_processor_count


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


arg = sys.argv[1]
if arg == "found":
    todo = [(300, 3584, 18944, True), (867, 13464, 9920, True), (883, 2384, 8384, True), (883, 2384, 8384, False),
            (355, 8584, 8256, True), (289, 10072, 3264, True), (496, 30936, 7296, False), (691, 13400, 7232, True),
            (182, 9560, 1216, True), (300, 4096, 4096, True), (300, 4096, 14336, True), (300, 6144, 4096, True),
            (300, 28672, 4096, True)]
else:
    _, seed, count = arg.split(":")
    rng = random.Random(int(seed))
    todo = [(rng.randint(65, 1024), 8 * rng.randint(64, 4096), 64 * rng.randint(8, 256), rng.random() < 0.6)
            for _ in range(int(count))]
plans = {p.build for m, n, k, bt in todo for p in gt.candidates(m, n, k, sms, bt) if p.build}
with ThreadPoolExecutor(8) as pool:
    list(pool.map(lambda b: hg.module("persistent", "sm_90a", build=b), plans))
print(f"{len(plans)} builds compiled", flush=True)
rows = []
for m, n, k, bt in todo:
    (res,) = tune_gemm([(m, n, k)], b_transposed=bt)
    torch.manual_seed(m + n + k)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    b = w.T if bt else w.T.contiguous()
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    ref = x.float() @ w.float().T
    got = gemm(x, b, variant="hopper", stream=torch.cuda.current_stream())
    err = ((got.float() - ref).norm() / ref.norm()).item()
    rule = hg.default_build(m, n, k, sms, bt)
    t = time_all({"torch": lambda: x @ b,
                  "tuned": lambda: gemm(x, b, variant="hopper", stream=torch.cuda.current_stream()),
                  "rule": lambda: hg.gemm_hopper(x, b, stream=torch.cuda.current_stream(), _build=rule)})
    rows.append((t["rule"] / t["tuned"], t["torch"] / t["tuned"], t["torch"] / t["rule"]))
    print(f"{'w.T' if bt else 'b':3s} {m:5d} x {n:5d} x {k:5d}: tuner {res.chosen} ({res.speedup:.3f}x by its own "
          f"timing) | timed apart: tuned {t['rule'] / t['tuned']:.3f}x the rule, {t['torch'] / t['tuned']:.3f}x torch "
          f"(rule {t['torch'] / t['rule']:.3f}x) err {err:.1e}{' BAD' if not err < 1e-2 else ''}", flush=True)
g = statistics.geometric_mean
print(f"{arg}: {len(rows)} products: tuned {g([r[0] for r in rows]):.3f}x the rule, {g([r[1] for r in rows]):.3f}x "
      f"torch (rule {g([r[2] for r in rows]):.3f}x); tuned slower than the rule by >3%: "
      f"{sum(r[0] < 0.97 for r in rows)}")
