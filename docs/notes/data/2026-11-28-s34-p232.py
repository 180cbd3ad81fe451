"""Session 34: a bf16 Linear 1024->4096 over 40 batches (outputs 4x the inputs): fullpipe
0.79x the naive loop in p231. Where does the time go? Alternating rounds in one process."""
import statistics, time
import numpy as np
import torch
import fullpipe as fp

dev = torch.device("cuda")
torch.manual_seed(0)
lin = torch.nn.Linear(1024, 4096, dtype=torch.bfloat16, device=dev)
def f(t):
    with torch.inference_mode():
        return lin(t)
xs = [torch.randn(int(n), 1024, dtype=torch.bfloat16) for n in np.random.default_rng(2).integers(16, 512, 40)]
outs = [torch.empty(x.shape[0], 4096, dtype=torch.bfloat16) for x in xs]
xs_np = [x.view(torch.int16).numpy() for x in xs]
pipe = fp.StreamPipeline(f)
for _ in range(10):
    pipe.run_batches(xs)
print("list_path:", pipe.stats.list_path)
print(pipe.stats)
pipe_outs = fp.StreamPipeline(f)
for _ in range(10):
    pipe_outs.run_batches(xs, outs)
dev_ys = [f(x.cuda()) for x in xs]
torch.cuda.synchronize()
ops = {
    "naive": lambda: [f(x.cuda()).cpu() for x in xs],
    "naive, outs reused": lambda: [o.copy_(f(x.cuda())) for x, o in zip(xs, outs)],
    "fullpipe": lambda: pipe.run_batches(xs),
    "fullpipe, outs reused": lambda: pipe_outs.run_batches(xs, outs),
    "D2H only (.cpu() of resident ys)": lambda: [y.cpu() for y in dev_ys],
    "host: torch.empty + copy_ from a reused array": lambda: [torch.empty_like(o).copy_(o) for o in outs],
}
res = {k: [] for k in ops}
for rd in range(7):
    for k, op in ops.items():
        torch.cuda.synchronize(); t0 = time.perf_counter(); op(); torch.cuda.synchronize()
        res[k].append((time.perf_counter() - t0) * 1e3)
out_mb = sum(o.numel() * 2 for o in outs) / 1e6
in_mb = sum(x.numel() * 2 for x in xs) / 1e6
print(f"in {in_mb:.1f} MB, out {out_mb:.1f} MB")
for k, v in res.items():
    print(f"{k:48s} {statistics.median(v):7.2f} ms  (min {min(v):.2f})")
print(pipe.stats)
print(pipe_outs.stats)
