"""p368: workload A (200 NumPy batches of 64-2048 rows x 512 f32 through a bf16 MLP, new outputs), defaults, after
16 warm-up runs: fullpipe (median of 15 runs), the naive loop and compute alone beside it."""
import statistics, time
import numpy as np
import torch
import fullpipe as fp

dev = torch.device("cuda")
rng = np.random.default_rng(0)
mlp = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.SiLU(), torch.nn.Linear(2048, 2048), torch.nn.SiLU(),
                          torch.nn.Linear(2048, 256)).to(dev, torch.bfloat16).eval()


@torch.inference_mode()
def f(x):
    return mlp(x.to(torch.bfloat16)).float()


xs = [rng.standard_normal((int(r), 512), dtype=np.float32) for r in rng.integers(64, 2048, 200)]
xs_dev = [torch.from_numpy(x).to(dev) for x in xs]
import sys
p = fp.StreamPipeline(f, compute_threads=1 if "t1" in sys.argv else "auto")
for _ in range(16):
    p.run_batches(xs)


def alone():
    for x in xs_dev:
        f(x)
    torch.cuda.synchronize()


def naive():
    return [f(torch.from_numpy(x).to(dev)).cpu().numpy() for x in xs]


def timed_loop():
    for _ in range(40):
        p.run_batches(xs)


if "spy" in sys.argv:
    timed_loop()
ta, tn, tf = [], [], []
for _ in range(15):
    t = time.perf_counter(); alone(); ta.append((time.perf_counter() - t) * 1e3)
    t = time.perf_counter(); p.run_batches(xs); tf.append((time.perf_counter() - t) * 1e3)
    if len(tn) < 5:
        t = time.perf_counter(); naive(); tn.append((time.perf_counter() - t) * 1e3)
st = p.stats
a, n_, f_ = statistics.median(ta), statistics.median(tn), statistics.median(tf)
print(f"RESULT A path {(st.list_path or {}).get('path')}: fullpipe {f_:.1f} ms, compute alone {a:.1f}, naive {n_:.1f}: "
      f"{a / f_:.3f}x alone, {n_ / f_:.2f}x naive; staging {st.staging}; host_us "
      f"{ {k: round(v) for k, v in (st.host_us or {}).items()} }", flush=True)
