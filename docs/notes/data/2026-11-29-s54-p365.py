"""p365: how the list trial (compute_threads='auto') measured workload A (200 NumPy batches, 64-2048 rows x 512 f32,
through a bf16 MLP): per run, the way it ran, its time, the trial's readings, pinned allocations, staging."""
import statistics, time
import numpy as np
import torch
import fullpipe as fp
from fullpipe.cuda.pinned_pool import default_pinned_pool
from fullpipe.cuda.pin_cache import default_pin_cache

dev = torch.device("cuda")
rng = np.random.default_rng(0)
mlp = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.SiLU(), torch.nn.Linear(2048, 2048), torch.nn.SiLU(),
                          torch.nn.Linear(2048, 256)).to(dev, torch.bfloat16).eval()


@torch.inference_mode()
def fa(x):
    return mlp(x.to(torch.bfloat16)).float()


xa = [rng.standard_normal((int(r), 512), dtype=np.float32) for r in rng.integers(64, 2048, 200)]
pool, cache = default_pinned_pool(), default_pin_cache()
p = fp.StreamPipeline(fa)
for r in range(16):
    a0, reg0 = pool.stats.allocations, cache.stats.register_s
    t = time.perf_counter()
    ys = p.run_batches(xa)
    ms = (time.perf_counter() - t) * 1e3
    del ys
    st = p.stats
    lp = st.list_path or {}
    print(f"run {r:2d}: {ms:7.1f} ms path {lp.get('path')!s:9s} pinned allocs +{pool.stats.allocations - a0} "
          f"register {1e3 * (cache.stats.register_s - reg0):5.1f} ms staging {st.staging} "
          f"host_us { {k: round(v) for k, v in (st.host_us or {}).items()} } | "
          f"{ {k: v for k, v in lp.items() if k.endswith('per_batch') or k == 'source'} }", flush=True)
trial = p._list_paths
print("trials:", {str(k): {w: [round(x) for x in v] for w, v in t.us.items()} for k, t in trial._trials.items()}
      if hasattr(trial, "_trials") else vars(trial))
# steady state: the two ways in alternating rounds
p1, p3 = fp.StreamPipeline(fa, compute_threads=1), fp.StreamPipeline(fa, compute_threads=3)
for _ in range(3):
    p1.run_batches(xa); p3.run_batches(xa)
t1, t3, td = [], [], []
for _ in range(7):
    for pp, acc in ((p1, t1), (p3, t3), (p, td)):
        t = time.perf_counter(); pp.run_batches(xa); acc.append((time.perf_counter() - t) * 1e3)
print(f"steady: pipelined {statistics.median(t1):.1f} ms, threads {statistics.median(t3):.1f} ms, defaults "
      f"{statistics.median(td):.1f} ms ({(p.stats.list_path or {}).get('path')})")
