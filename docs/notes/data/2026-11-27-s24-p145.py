"""Per-batch host cost on fullpipe's own kernel: where it goes (cProfile) and what each mode costs."""
import cProfile, pstats, statistics, io, time
import numpy as np
from fullpipe import Device
from fullpipe.cuda.memory import pinned_empty
from fullpipe.pipeline import StreamPipeline
from fullpipe.pipeline.workload import MixKernel

dev = Device(0); dev.set_current()
kernel = MixKernel(dev, rounds=0)
for kib in (16, 1024):
    n = kib * 256
    nb = 4000 if kib == 16 else 400
    x = pinned_empty((nb, n), np.uint32); x[:] = 7
    y = pinned_empty(x.shape, x.dtype)
    for graph in (False, "batch", True):
        for timing in (False, True):
            if graph and timing: continue
            with StreamPipeline(kernel, streams=3, chunk=1, timing=timing, device=dev, graph=graph) as pipe:
                for _ in range(3): pipe.run(x, out=y)
                runs, walls = [], []
                for _ in range(7):
                    t0 = time.perf_counter(); pipe.run(x, out=y); walls.append((time.perf_counter()-t0)/nb*1e6)
                    runs.append(pipe.stats.enqueue_us_per_batch)
                print(f"{kib:5d} KiB graph={graph!s:5s} timing={timing!s:5s} enqueue/batch median {statistics.median(runs):6.2f} min {min(runs):6.2f}  wall/batch median {statistics.median(walls):7.2f}")
                if kib == 16 and not timing and graph in (False, "batch"):
                    pr = cProfile.Profile(); pr.enable(); pipe.run(x, out=y); pr.disable()
                    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(22); print(s.getvalue()[:6000])
