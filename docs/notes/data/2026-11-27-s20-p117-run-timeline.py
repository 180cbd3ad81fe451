"""p117 (session 20): where a run's fixed cost goes. One run_batches of 12 pinned 8 MiB
batches (x * 2, outs= given) against a hand loop of the same copies and kernels, under
CUPTI: from the call to the first GPU operation, the GPU span, the engines' busy time and
gaps, and from the last GPU operation to the call's return."""
import statistics, numpy as np, torch, fullpipe as fp
from fullpipe import trace

xs = [torch.randn(2048, 1024).pin_memory() for _ in range(12)]
outs = [torch.empty_like(x).pin_memory() for x in xs]
f = lambda x: x * 2
pool = fp.DevicePool(0, release_threshold="max")
pipe = fp.StreamPipeline(f, pool=pool, timing=False)
ss = [torch.cuda.Stream() for _ in range(3)]
dev = [torch.empty(2048, 1024, device="cuda") for _ in range(3)]
def hand():
    for i, (x, o) in enumerate(zip(xs, outs)):
        s = ss[i % 3]
        with torch.cuda.stream(s):
            d = dev[i % 3]
            d.copy_(x, non_blocking=True)
            o.copy_(f(d), non_blocking=True)
    torch.cuda.synchronize()
def fpr():
    pipe.run_batches(xs, outs=outs)
for _ in range(10):
    hand(); fpr()
marks = []
with trace.capture() as cap:
    ts = cap._session.timestamp
    for r in range(8):
        for name, fn in (("fullpipe", fpr), ("hand", hand)):
            t0 = ts(); fn(); t1 = ts()
            marks.append((name, t0, t1))
recs = [r for r in cap.timeline.records if r.kind in ("memcpy", "kernel")]
def union(iv):
    tot, cs, ce = 0, None, None
    for a, b in sorted(iv):
        if ce is None or a > ce:
            if ce is not None: tot += ce - cs
            cs, ce = a, b
        else: ce = max(ce, b)
    return tot + ((ce - cs) if ce is not None else 0)
rows = {}
for name, t0, t1 in marks:
    rr = [r for r in recs if t0 <= r.start_ns <= t1]
    h2d = [(r.start_ns, r.end_ns) for r in rr if r.kind == "memcpy" and r.direction == "h2d"]
    d2h = [(r.start_ns, r.end_ns) for r in rr if r.kind == "memcpy" and r.direction == "d2h"]
    ker = [(r.start_ns, r.end_ns) for r in rr if r.kind == "kernel"]
    first = min(r.start_ns for r in rr); last = max(r.end_ns for r in rr)
    d = dict(call=(t1 - t0) / 1e3, to_first=(first - t0) / 1e3, span=(last - first) / 1e3, tail=(t1 - last) / 1e3,
             h2d_busy=union(h2d) / 1e3, d2h_busy=union(d2h) / 1e3, k_busy=union(ker) / 1e3,
             h2d_first_to_last=(max(b for _, b in h2d) - min(a for a, _ in h2d)) / 1e3, n=len(rr),
             kernels=len(ker))
    rows.setdefault(name, []).append(d)
print("us, median of 8 (CUPTI on: host calls slower than without)")
keys = ["call", "to_first", "span", "tail", "h2d_busy", "h2d_first_to_last", "d2h_busy", "k_busy", "n", "kernels"]
print(f"{'':10s}" + "".join(f"{k:>18s}" for k in keys))
for name, ds in rows.items():
    print(f"{name:10s}" + "".join(f"{statistics.median(d[k] for d in ds):18.1f}" for k in keys))
# the fullpipe run's operations in order, with stream and gaps (last round)
name, t0, t1 = [m for m in marks if m[0] == "fullpipe"][-1]
rr = sorted([r for r in recs if t0 <= r.start_ns <= t1], key=lambda r: r.start_ns)
print("\nfullpipe run, operations (us from the call):")
for r in rr:
    print(f"  {r.kind:7s} {r.direction or r.name[:30]:30s} stream {r.stream}  {(r.start_ns - t0)/1e3:8.1f} -> {(r.end_ns - t0)/1e3:8.1f}")
name, t0, t1 = [m for m in marks if m[0] == "hand"][-1]
rr = sorted([r for r in recs if t0 <= r.start_ns <= t1], key=lambda r: r.start_ns)
print("\nhand loop, operations (us from the call):")
for r in rr:
    print(f"  {r.kind:7s} {r.direction or r.name[:30]:30s} stream {r.stream}  {(r.start_ns - t0)/1e3:8.1f} -> {(r.end_ns - t0)/1e3:8.1f}")
