"""p127 (session 21): new outputs of a pageable input pinned in place: pageable and staged (new) against
pinned from the pinned pool (old: by_owner patched to True), `y = pipe.run(x)` six times in a loop, at
256 MiB, 1 GiB and 4.3 GB (t*2). ms per run; pinned bytes allocated per run; pool held at the end."""
import time, warnings, sys
import numpy as np, torch, fullpipe as fp
from fullpipe.pipeline import executor as E
warnings.simplefilter("ignore")
real = E._Pins.by_owner
def timed(fn):
    t0 = time.perf_counter(); r = fn(); torch.cuda.synchronize(); return r, (time.perf_counter() - t0) * 1e3
g = lambda t: t * 2
for rows in (262_144, 1_048_576, 4_200_000):
    x = np.random.standard_normal((rows, 256)).astype(np.float32)
    for policy in ("new", "old", "new"):
        E._Pins.by_owner = real if policy == "new" else (lambda self, side: True)
        p = fp.StreamPipeline(g)
        ms_l, alloc_l = [], []
        y = None
        for r in range(6):
            y, ms = timed(lambda: p.run(x))
            ms_l.append(round(ms)); alloc_l.append(round(p.stats.pinned["allocated_bytes"] / 2**20))
        ok = bool(np.array_equal(y[::331], x[::331] * 2))
        print(f"{x.nbytes / 2**20:.0f} MiB {policy}: ms {ms_l} (sum {sum(ms_l)}), pinned MiB allocated {alloc_l}, staging {p.stats.staging}, "
              f"pool held {fp.cuda.default_pinned_pool().stats.held_bytes / 2**20:.0f} MiB, exact {ok}", flush=True)
        del y
        p.close()
    del x
    fp.cuda.default_pinned_pool().trim()
E._Pins.by_owner = real
