"""p363: workload A (200 NumPy batches through a bf16 MLP, new outputs, compute_threads=1): does the run's pinned
output block go back to the pool when the caller drops the outputs (refcounts), or only at a garbage collection?"""
import gc, statistics, sys, time
import numpy as np
import torch
import fullpipe as fp
from fullpipe.cuda.pinned_pool import default_pinned_pool

dev = torch.device("cuda")
rng = np.random.default_rng(0)
mlp = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.SiLU(), torch.nn.Linear(2048, 2048), torch.nn.SiLU(),
                          torch.nn.Linear(2048, 256)).to(dev, torch.bfloat16).eval()


@torch.inference_mode()
def fa(x):
    return mlp(x.to(torch.bfloat16)).float()


xa = [rng.standard_normal((int(r), 512), dtype=np.float32) for r in rng.integers(64, 2048, 200)]
pool = default_pinned_pool()
for threads in (1, "auto"):
    pa = fp.StreamPipeline(fa, compute_threads=threads)
    print(f"== compute_threads={threads}", flush=True)
    for r in range(10):
        s0 = pool.stats
        t = time.perf_counter()
        ys = pa.run_batches(xa)
        ms = (time.perf_counter() - t) * 1e3
        s1 = pool.stats
        base = ys[0]
        while getattr(base, "base", None) is not None:
            base = base.base
        del ys
        s2 = pool.stats
        refs = [type(x).__name__ for x in gc.get_referrers(base)] if r == 5 else None
        n = gc.collect()
        s3 = pool.stats
        print(f"  run {r}: {ms:7.1f} ms, wall {pa.stats.wall_ms:6.1f}; allocations +{s1.allocations - s0.allocations} "
              f"reuses +{s1.reuses - s0.reuses}; in use after run {s1.in_use_bytes >> 20} MiB, after del "
              f"{s2.in_use_bytes >> 20} MiB, after gc.collect() ({n} objects) {s3.in_use_bytes >> 20} MiB"
              + (f"; referrers of the block's base array: {refs}" if refs else ""), flush=True)
        del base
    for r in range(4):  # no gc.collect between runs
        s0 = pool.stats
        t = time.perf_counter()
        ys = pa.run_batches(xa)
        ms = (time.perf_counter() - t) * 1e3
        del ys
        s1 = pool.stats
        print(f"  run (no collect) {r}: {ms:7.1f} ms; allocations +{s1.allocations - s0.allocations}, in use after del "
              f"{s1.in_use_bytes >> 20} MiB", flush=True)
    pa.close()
