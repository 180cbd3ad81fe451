"""p128 (session 21): new outputs of a pageable input pinned in place under the ski-rental rule (pinned outputs
from the input's 16th run in place) against pinned at once (the rule patched off), `y = pipe.run(x)` 20 times
in a loop, at 256 MiB, 1 GiB (both) and 4.3 GB (the rule only). ms per run, staging of the output."""
import time, warnings
import numpy as np, torch, fullpipe as fp
from fullpipe.pipeline import executor as E
warnings.simplefilter("ignore")
def timed(fn):
    t0 = time.perf_counter(); r = fn(); torch.cuda.synchronize(); return r, (time.perf_counter() - t0) * 1e3
g = lambda t: t * 2
for rows, policies in ((262_144, ("rule", "at once")), (1_048_576, ("rule", "at once")), (4_200_000, ("rule",))):
    x = np.random.standard_normal((rows, 256)).astype(np.float32)
    for policy in policies:
        E.PINNED_OUTPUTS_AFTER_RUNS = 16 if policy == "rule" else 0
        fp.cuda.default_pin_cache().clear() if hasattr(fp.cuda, "default_pin_cache") else None
        p = fp.StreamPipeline(g)
        ms_l, out = [], []
        y = None
        for r in range(20):
            y, ms = timed(lambda: p.run(x))
            ms_l.append(round(ms)); out.append(p.stats.staging["output"][0])
        ok = bool(np.array_equal(y[::331], x[::331] * 2))
        print(f"{x.nbytes / 2**20:.0f} MiB {policy}: ms {ms_l} (sum {sum(ms_l)}), output {''.join(out)}, "
              f"input runs {p.stats.pinned.get('in_place', {}).get('input_runs')}, pool held "
              f"{fp.cuda.default_pinned_pool().stats.held_bytes / 2**20:.0f} MiB, exact {ok}", flush=True)
        del y
        p.close()
        fp.cuda.default_pinned_pool().trim()
    del x
