"""p118 (session 20): does imap over np.load'ed files pin windows in place (the pin cache
seeing new arrays at reused addresses)? A of p114 with pin_in_place True / False, the pin
cache's registrations, each window's staging."""
import os, sys, time, statistics, tempfile
import numpy as np, torch, fullpipe as fp
from fullpipe.cuda.pin_cache import default_pin_cache
d = tempfile.mkdtemp(dir="/dev/shm")
ROWS, DIM, NFILES = 8192, 1024, 32
rng = np.random.default_rng(0)
paths = []
for i in range(NFILES):
    p = os.path.join(d, f"b{i}.npy"); np.save(p, rng.standard_normal((ROWS, DIM), dtype=np.float32)); paths.append(p)
with torch.device("cuda"):
    mlp = torch.nn.Sequential(torch.nn.Linear(DIM, 4096), torch.nn.GELU(), torch.nn.Linear(4096, DIM)).to(torch.bfloat16).eval()
@torch.inference_mode()
def f(x):
    return mlp(x.to(torch.bfloat16)).float()
def files():
    for p in paths:
        yield np.load(p)
pool = fp.DevicePool(0, release_threshold="max")
pipes = {True: fp.StreamPipeline(f, pool=pool), False: fp.StreamPipeline(f, pool=pool, pin_in_place=False)}
class Spy:
    def __init__(self, pipe):
        self.pipe, self.staging = pipe, []
        orig = pipe._run_batches
        def wrapped(items, outs=None, warn_few=True):
            r = orig(items, outs, warn_few)
            self.staging.append((len(items), pipe.stats.staging.get("input"), pipe.stats.staging.get("output"),
                                 round(pipe.stats.wall_ms, 1)))
            return r
        pipe._run_batches = wrapped
spies = {k: Spy(p) for k, p in pipes.items()}
times = {True: [], False: []}
for r in range(6):
    for k in ((True, False) if r % 2 == 0 else (False, True)):
        c0 = default_pin_cache().stats
        t0 = time.perf_counter()
        n = sum(1 for _ in pipes[k].imap(files()))
        times[k].append((time.perf_counter() - t0) * 1e3)
        c1 = default_pin_cache().stats
        print(f"round {r} pin_in_place={k}: {times[k][-1]:.1f} ms, registrations +{c1.registrations - c0.registrations}, "
              f"windows {[s for s in spies[k].staging]}", flush=True)
        spies[k].staging.clear()
for k in (True, False):
    print(f"pin_in_place={k}: median {statistics.median(times[k]):.1f} ms ({[round(t) for t in times[k]]})")
