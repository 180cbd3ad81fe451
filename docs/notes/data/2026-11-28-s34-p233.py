"""Session 34: outputs 4x the inputs into new pageable memory (p232). Is fullpipe's
time the host's fresh pages, or fullpipe's? One process, alternating rounds."""
import statistics, time, ctypes
import numpy as np
import torch
import fullpipe as fp

print("THP:", open("/sys/kernel/mm/transparent_hugepage/enabled").read().strip(),
      "| defrag:", open("/sys/kernel/mm/transparent_hugepage/defrag").read().strip())
dev = torch.device("cuda")
torch.manual_seed(0)
lin = torch.nn.Linear(1024, 4096, dtype=torch.bfloat16, device=dev)
def f(t):
    with torch.inference_mode():
        return lin(t)
xs = [torch.randn(int(n), 1024, dtype=torch.bfloat16) for n in np.random.default_rng(2).integers(16, 512, 40)]
outs = [torch.empty(x.shape[0], 4096, dtype=torch.bfloat16) for x in xs]
src = [o.clone() for o in outs]
pipes = {c: fp.StreamPipeline(f, copy_threads=c) for c in (None, 1)}
for p in pipes.values():
    for _ in range(10):
        p.run_batches(xs)
print("copy threads default:", pipes[None].copy_threads, pipes[None].stats.list_path)
dev_ys = [f(x.cuda()) for x in xs]
torch.cuda.synchronize()

def np_fill():
    return [np.copyto(np.empty(o.shape, np.int16), s.view(torch.int16).numpy()) for o, s in zip(outs, src)]
ops = {
    "naive": lambda: [f(x.cuda()).cpu() for x in xs],
    "fullpipe (default copy threads)": lambda: pipes[None].run_batches(xs),
    "fullpipe, copy_threads=1": lambda: pipes[1].run_batches(xs),
    "D2H only (.cpu() of resident ys)": lambda: [y.cpu() for y in dev_ys],
    "host: np.empty + copyto (1 thread)": np_fill,
    "host: torch.empty + copy_ (1 thread)": lambda: [torch.empty_like(s).copy_(s) for s in src],
    "host: copy_ into reused (1 thread)": lambda: [o.copy_(s) for o, s in zip(outs, src)],
}
res = {k: [] for k in ops}
for rd in range(9):
    for k, op in ops.items():
        torch.cuda.synchronize(); t0 = time.perf_counter(); r = op(); torch.cuda.synchronize()
        res[k].append((time.perf_counter() - t0) * 1e3)
        del r
for k, v in res.items():
    print(f"{k:40s} {statistics.median(v):7.2f} ms  (min {min(v):.2f}, max {max(v):.2f})")
for c, p in pipes.items():
    p.run_batches(xs)
    st = p.stats
    print(c, f"wall {st.wall_ms:.1f} ms", {k: round(v, 1) for k, v in st.host_us.items()}, st.staging)
