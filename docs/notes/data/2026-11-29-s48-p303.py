"""p303: where the variable-length workload's time goes (bench workloads --quick's list: 29 encoder batches, ~16 ms).
Device-resident: the host-paced loop (the bound), the same round-robin on 3 streams, and GPU time alone (the host
far ahead behind a sleep kernel) on 1 and 3 streams; then fullpipe's defaults (outs given / new outputs), streams=1,
copy_streams=True. Alternating rounds, medians."""
import statistics, time, sys
import torch
import fullpipe as fp
from fullpipe.experiments import workloads as W

dev = torch.device("cuda")
gen = torch.Generator().manual_seed(1414)
tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 256 * 1024
w = W._variable_length(torch, dev, tokens, gen, seed=14)
xs, ys, f = w.xs, w.ys, w.f
print(f"{len(xs)} batches, {w.items} tokens, in {w.in_bytes / 1e6:.2f} MB out {w.out_bytes / 1e6:.2f} MB", flush=True)
ss = [torch.cuda.Stream() for _ in range(3)]
xd = [t.to(dev) for t in xs]
torch.cuda.synchronize()


def alone(n):
    for i, x in enumerate(xd):
        with torch.cuda.stream(ss[i % n]):
            f(x)
    for s in ss[:n]:
        s.synchronize()


host_us = []


def gpu_only(n):
    """GPU time of the batches with the host far ahead (a sleep kernel first); returns ms."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(ss[0]):
        torch.cuda._sleep(60_000_000)
        a.record()
    for s in ss[1:n]:
        s.wait_event(a)
    t = time.perf_counter()
    for i, x in enumerate(xd):
        with torch.cuda.stream(ss[i % n]):
            f(x)
    host_us.append((time.perf_counter() - t) * 1e6 / len(xd))
    for s in ss[1:n]:
        ss[0].wait_stream(s)
    with torch.cuda.stream(ss[0]):
        b.record()
    b.synchronize()
    return a.elapsed_time(b)


pipes = {"fp default": fp.StreamPipeline(f), "fp new output": fp.StreamPipeline(f),
         "fp streams=1": fp.StreamPipeline(f, streams=1), "fp copy_streams": fp.StreamPipeline(f, copy_streams=True)}
for k, p in pipes.items():
    for _ in range(14):
        p.run_batches(xs, outs=None if k == "fp new output" else ys)
    print(f"{k}: list_path {p.stats.list_path}", flush=True)
gpu = {1: [], 3: []}
cont = {"alone 1 stream": lambda: alone(1), "alone 3 streams": lambda: alone(3)}
for k, p in pipes.items():
    cont[k] = (lambda p=p, k=k: p.run_batches(xs, outs=None if k == "fp new output" else ys))
ts = {k: [] for k in cont}
for r in range(15):
    for n in (1, 3):
        gpu[n].append(gpu_only(n))
    for k in (list(cont) if r % 2 else list(cont)[::-1]):
        torch.cuda.synchronize(); t = time.perf_counter(); cont[k](); torch.cuda.synchronize()
        ts[k].append((time.perf_counter() - t) * 1e3)
med = {k: statistics.median(v) for k, v in ts.items()}
base = med["alone 1 stream"]
print(f"GPU only: 1 stream {statistics.median(gpu[1]):.2f} ms, 3 streams {statistics.median(gpu[3]):.2f} ms; "
      f"host enqueue per batch (host ahead) {statistics.median(host_us):.0f} us", flush=True)
for k, v in med.items():
    st = pipes[k].stats if k in pipes else None
    extra = f" host_us {({a: round(b) for a, b in st.host_us.items()} if st.host_us else None)} staging {st.staging}" if st else ""
    print(f"RESULT {k:18s} {v:7.2f} ms  alone/this {base / v:.3f}  (min {min(ts[k]):.2f}){extra}", flush=True)
