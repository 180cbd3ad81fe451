"""Session 33: where the plain path's host time goes for a long list of small batches (the
tiny MLP of p226, 300 batches of 4-32 rows), forced plain; run under py-spy."""
import sys, time
import numpy as np, torch
import fullpipe as fp
from fullpipe.pipeline.list_paths import PLAIN

with torch.device("cuda"):
    mlp = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).eval()


def tiny_f(x):
    with torch.inference_mode():
        return mlp(x)


r = np.random.default_rng(1)
xs = [torch.randn(int(n), 512) for n in r.integers(4, 33, 300)]
pl = fp.StreamPipeline(tiny_f)
pl._list_paths.next_path = lambda key: PLAIN
secs = float(sys.argv[1]) if len(sys.argv) > 1 else 10
t_end = time.perf_counter() + secs
n = 0
while time.perf_counter() < t_end:
    pl.run_batches(xs); n += 1
print(f"{n} runs; last {pl.stats.host_us}")
