"""Session 34: new pageable outputs drained in finer pieces (argv[1]: old/new code). Three
workloads, each naive and fullpipe, alternating rounds, medians (ms)."""
import statistics, sys, time
import numpy as np
import torch
import fullpipe as fp

dev = torch.device("cuda")
torch.manual_seed(0)
lin = torch.nn.Linear(1024, 4096, dtype=torch.bfloat16, device=dev)
def f_wide(t):
    with torch.inference_mode():
        return lin(t)
mlp = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).to(dev, torch.bfloat16)
def f_mlp(t):
    with torch.inference_mode():
        return mlp(t.to(torch.bfloat16)).float()
rng = np.random.default_rng(2)
work = {
    "wide outputs (40 batches, 86 MB out)": (f_wide, [torch.randn(int(n), 1024, dtype=torch.bfloat16) for n in rng.integers(16, 512, 40)], "list"),
    "MLP list (24 batches of 1-4 MiB fp32)": (f_mlp, [torch.randn(int(n), 512) for n in rng.integers(512, 2048, 24)], "list"),
    "MLP run() of 256 MiB fp32": (f_mlp, torch.randn(131072, 512), "run"),
}
pipes = {k: fp.StreamPipeline(w[0]) for k, w in work.items()}
def fp_op(k):
    f, x, how = work[k]
    return (lambda: pipes[k].run_batches(x)) if how == "list" else (lambda: pipes[k].run(x))
def naive_op(k):
    f, x, how = work[k]
    xs = x if how == "list" else list(x.split(16384))
    return lambda: [f(b.cuda()).cpu() for b in xs]
for k in work:
    for _ in range(10):
        fp_op(k)()
    print(k, "|", pipes[k].stats.staging, pipes[k].stats.list_path and pipes[k].stats.list_path.get("path"))
ops = {}
for k in work:
    ops[(k, "naive")] = naive_op(k)
    ops[(k, "fullpipe")] = fp_op(k)
res = {k: [] for k in ops}
for rd in range(7):
    for k, op in ops.items():
        torch.cuda.synchronize(); t0 = time.perf_counter(); r = op(); torch.cuda.synchronize()
        res[k].append((time.perf_counter() - t0) * 1e3)
        del r
for k in work:
    n, f_ = statistics.median(res[(k, "naive")]), statistics.median(res[(k, "fullpipe")])
    print(f"{sys.argv[1]} {k:40s} naive {n:7.2f} ms fullpipe {f_:7.2f} ms  fullpipe/naive speed {n / f_:.2f}x")
