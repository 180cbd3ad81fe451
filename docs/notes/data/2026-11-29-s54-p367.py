"""p367: workload C (4000 tiny torch batches, 16 x 256 f32, through a Linear), run N times in timed_loop(), for py-spy;
the naive loop and compute alone timed beside it."""
import sys, time, statistics
import torch
import fullpipe as fp

n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
dev = torch.device("cuda")
lin = torch.nn.Linear(256, 256).to(dev).eval()


@torch.inference_mode()
def f(x):
    return lin(x)


xs = [torch.randn(16, 256) for _ in range(4000)]
p = fp.StreamPipeline(f)
for _ in range(12):
    p.run_batches(xs)
xs_dev = [x.to(dev) for x in xs]


def alone():
    for x in xs_dev:
        f(x)
    torch.cuda.synchronize()


def naive():
    return [f(x.to(dev)).cpu() for x in xs]


def timed_loop():
    ts = []
    for _ in range(n):
        t = time.perf_counter(); p.run_batches(xs); ts.append((time.perf_counter() - t) * 1e3)
    return ts


ta, tn = [], []
for _ in range(3):
    t = time.perf_counter(); alone(); ta.append((time.perf_counter() - t) * 1e3)
    t = time.perf_counter(); naive(); tn.append((time.perf_counter() - t) * 1e3)
ts = timed_loop()
st = p.stats
print(f"RESULT path {(st.list_path or {}).get('path')}: fullpipe {statistics.median(ts):.1f} ms, naive "
      f"{statistics.median(tn):.1f}, compute alone {statistics.median(ta):.1f}: {statistics.median(tn) / statistics.median(ts):.2f}x naive; "
      f"host_us { {k: round(v, 1) for k, v in (st.host_us or {}).items()} }", flush=True)
