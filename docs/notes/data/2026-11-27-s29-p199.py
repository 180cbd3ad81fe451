"""Session 29: the grouped calls against one call at a time on p197's workloads where
fullpipe lost to the naive loop (GRU, tiny MLP batches, CuPy over a pageable list), and
repeated with more rounds (p199). Same process, alternating rounds."""
import time, statistics
import numpy as np, torch, cupy as cp
import fullpipe as fp

class OneAtATime(fp.StreamPipeline):
    def _call_group(self, mode, tc, ring_in):
        return 1

def rounds(cands, n=15):
    res = {k: [] for k in cands}; items = list(cands.items())
    for r in range(n):
        for k, fn in items[r % len(items):] + items[:r % len(items)]:
            torch.cuda.synchronize()
            t0 = time.perf_counter(); fn(); res[k].append((time.perf_counter() - t0) * 1e3)
    return {k: round(statistics.median(v), 1) for k, v in res.items()}

rng = np.random.default_rng(0)
tdev = torch.device("cuda"); ts = torch.cuda.Stream()
gru = torch.nn.GRU(256, 512, num_layers=2, batch_first=True).to(tdev).eval()
def gfun(x):
    with torch.inference_mode():
        return gru(x)[0][:, -1]
gb = [torch.randn(int(b), int(l), 256) for b, l in zip(rng.integers(8, 64, 40), rng.choice([32, 64, 128], 40))]
mlp = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).to(tdev).eval()
def mfun(x):
    with torch.inference_mode():
        return mlp(x)
tb = [torch.randn(int(r), 512) for r in rng.integers(4, 32, 300)]
xs = [rng.standard_normal((int(r), 1024), dtype=np.float32) for r in rng.integers(200, 4000, 60)]
def cfun(x):
    e = cp.exp(x - x.max(axis=1, keepdims=True)); return (e / e.sum(axis=1, keepdims=True)) @ cp.ones((1024, 64), cp.float32)

def small(x): return x * 2
sb = [np.random.default_rng(1).random((64 + (i % 7), 256), dtype=np.float32) for i in range(400)]
for name, f, batches, kw in (("tiny MLP", mfun, tb, {}), ("x*2", small, sb, {}), ("tiny MLP again", mfun, tb, {}), ("cupy", cfun, xs, {"form": "cupy"})):
    pg, p1 = fp.StreamPipeline(f, **kw), OneAtATime(f, **kw)
    a, b = pg.run_batches(batches), p1.run_batches(batches)
    same = all((torch.equal(u, v) if isinstance(u, torch.Tensor) else np.array_equal(u, v)) for u, v in zip(a, b))
    if name == "cupy":
        naive = lambda: [cp.asnumpy(f(cp.asarray(x))) for x in batches]
    else:
        naive = (lambda: [f(torch.from_numpy(x).to(tdev)).cpu() for x in batches]) if name == "x*2" else (lambda: [f(x.to(tdev)).cpu() for x in batches])
    med = rounds({"grouped": lambda: pg.run_batches(batches), "one at a time": lambda: p1.run_batches(batches), "naive": naive})
    print(f"{name}: {med}; outputs equal {same}; host/batch grouped {({k: round(v) for k, v in pg.stats.host_us.items()})} "
          f"one {({k: round(v) for k, v in p1.stats.host_us.items()})}; staging {pg.stats.staging}", flush=True)

