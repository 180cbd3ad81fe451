"""Session 34: outputs 4x inputs into new pageable memory (p232, p233): fullpipe's ring
drain took ~1.2 ms a batch. Host copies alone: pinned -> new / reused pageable, 1 or 8
threads; and fullpipe into reused outputs without pinning them (the ring, no new pages)."""
import statistics, time, ctypes
from concurrent.futures import ThreadPoolExecutor
import numpy as np
import torch
import fullpipe as fp

dev = torch.device("cuda")
torch.manual_seed(0)
lin = torch.nn.Linear(1024, 4096, dtype=torch.bfloat16, device=dev)
def f(t):
    with torch.inference_mode():
        return lin(t)
sizes = [int(n) * 4096 * 2 for n in np.random.default_rng(2).integers(16, 512, 40)]
xs = [torch.randn(s // 8192, 1024, dtype=torch.bfloat16) for s in sizes]
outs = [torch.empty(x.shape[0], 4096, dtype=torch.bfloat16) for x in xs]
pinned = [torch.empty(4 << 20, dtype=torch.uint8, pin_memory=True) for _ in range(4)]
pageable_src = [torch.empty(4 << 20, dtype=torch.uint8) for _ in range(4)]
for p in pinned + pageable_src:
    p.fill_(3)
reused = [np.empty(s, np.uint8) for s in sizes]
for r in reused:
    r.fill(1)
pool8 = ThreadPoolExecutor(8)

def copies(new, src, threads):
    def one(i):
        dst = np.empty(sizes[i], np.uint8) if new else reused[i]
        ctypes.memmove(dst.ctypes.data, src[i % 4].data_ptr(), sizes[i])
        return dst
    if threads == 1:
        return [one(i) for i in range(40)]
    return list(pool8.map(one, range(40)))

pipe_new = fp.StreamPipeline(f)
pipe_reused = fp.StreamPipeline(f, pin_in_place=False)
for _ in range(10):
    pipe_new.run_batches(xs); pipe_reused.run_batches(xs, outs)
ops = {
    "naive": lambda: [f(x.cuda()).cpu() for x in xs],
    "fullpipe, new outputs": lambda: pipe_new.run_batches(xs),
    "fullpipe, reused outs, not pinned": lambda: pipe_reused.run_batches(xs, outs),
    "memmove pinned->new, 1 thread": lambda: copies(True, pinned, 1),
    "memmove pinned->new, 8 threads": lambda: copies(True, pinned, 8),
    "memmove pinned->reused, 1 thread": lambda: copies(False, pinned, 1),
    "memmove pinned->reused, 8 threads": lambda: copies(False, pinned, 8),
    "memmove pageable->new, 1 thread": lambda: copies(True, pageable_src, 1),
}
res = {k: [] for k in ops}
for rd in range(9):
    for k, op in ops.items():
        torch.cuda.synchronize(); t0 = time.perf_counter(); r = op(); torch.cuda.synchronize()
        res[k].append((time.perf_counter() - t0) * 1e3)
        del r
print(f"out {sum(sizes) / 1e6:.1f} MB in 40 arrays of {min(sizes) >> 10}-{max(sizes) >> 10} KiB")
for k, v in res.items():
    print(f"{k:40s} {statistics.median(v):7.2f} ms  (min {min(v):.2f}, max {max(v):.2f})")
for name, p in (("new", pipe_new), ("reused", pipe_reused)):
    st = p.stats
    print(name, f"wall {st.wall_ms:.1f} ms", {k: round(v, 1) for k, v in st.host_us.items()}, st.staging,
          "slots", getattr(p, "slots", "?"))
