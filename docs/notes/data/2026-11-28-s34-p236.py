"""Session 34: small inputs, large outputs (an LM head's logits: 1024 -> 32000 bf16, 64 KiB
out per token). Short lists (plain path), one request (run), a long list; naive and fullpipe,
alternating rounds, medians (ms). argv[1]: label."""
import statistics, sys, time
import numpy as np
import torch
import fullpipe as fp

dev = torch.device("cuda")
torch.manual_seed(0)
head = torch.nn.Linear(1024, 32000, bias=False, dtype=torch.bfloat16, device=dev)
def f(t):
    with torch.inference_mode():
        return head(t)
rng = np.random.default_rng(5)
short = [torch.randn(int(n), 1024, dtype=torch.bfloat16) for n in rng.integers(64, 256, 8)]
one = torch.randn(256, 1024, dtype=torch.bfloat16)
long = [torch.randn(int(n), 1024, dtype=torch.bfloat16) for n in rng.integers(16, 128, 40)]
cases = {"8 requests of 64-256 tokens (run_batches)": ("list", short),
         "one request of 256 tokens (run)": ("run", one),
         "40 requests of 16-128 tokens (run_batches)": ("list", long)}
pipes = {k: fp.StreamPipeline(f) for k in cases}
def fp_op(k):
    how, x = cases[k]
    return (lambda: pipes[k].run_batches(x)) if how == "list" else (lambda: pipes[k].run(x))
def naive_op(k):
    how, x = cases[k]
    xs = x if how == "list" else [x]
    return lambda: [f(b.cuda()).cpu() for b in xs]
for k in cases:
    for _ in range(10):
        fp_op(k)()
    st = pipes[k].stats
    print(sys.argv[1], k, "|", st.staging, st.list_path and st.list_path.get("path"), {a: round(b, 1) for a, b in st.host_us.items()})
ops = {(k, w): (naive_op(k) if w == "naive" else fp_op(k)) for k in cases for w in ("naive", "fullpipe")}
res = {k: [] for k in ops}
for rd in range(7):
    for key, op in ops.items():
        torch.cuda.synchronize(); t0 = time.perf_counter(); r = op(); torch.cuda.synchronize()
        res[key].append((time.perf_counter() - t0) * 1e3)
        del r
for k, (how, x) in cases.items():
    mb = sum(b.shape[0] for b in (x if how == "list" else [x])) * 64000 / 1e6
    n, f_ = statistics.median(res[(k, "naive")]), statistics.median(res[(k, "fullpipe")])
    print(f"{sys.argv[1]} {k:44s} {mb:6.1f} MB out: naive {n:7.2f} ms fullpipe {f_:7.2f} ms  speed {n / f_:.2f}x")
