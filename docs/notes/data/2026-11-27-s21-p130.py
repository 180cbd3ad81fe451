"""p130 (session 21): single small requests after the plain path: pipe.run(t) of x*2 and of a bf16 MLP,
256 KiB to 4 MiB, pageable and pinned, NumPy and torch, against the naive call and against the pipelined
path (timing=True keeps a run pipelined). Medians of 300 calls, us."""
import time, statistics
import numpy as np, torch, fullpipe as fp
pool = fp.DevicePool(0, release_threshold="max")
lin = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 1024)).cuda().to(torch.bfloat16).eval()
@torch.inference_mode()
def mlp(x):
    return lin(x.to(torch.bfloat16)).float()
def bench(fn, n=300):
    for _ in range(20): fn()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e6
for fname, f in (("x*2", lambda x: x * 2), ("bf16 MLP", mlp)):
    plain = fp.StreamPipeline(f, pool=pool)
    piped = fp.StreamPipeline(f, pool=pool, timing=True)
    for kb in (256, 1024, 4096):
        for kind in ("pageable", "pinned", "numpy"):
            t = torch.randn(kb * 256 // 1024, 1024)
            if kind == "pinned": t = t.pin_memory()
            xin = t.numpy() if kind == "numpy" else t
            ref = f(t.cuda()).cpu()
            naive = bench(lambda: f(torch.as_tensor(xin).cuda(non_blocking=True)).cpu())
            a = bench(lambda: plain.run(xin))
            assert plain.stats.staging["input"] == "plain"
            b = bench(lambda: piped.run(xin))
            err = float((torch.as_tensor(plain.run(xin)) - ref).abs().max())
            print(f"{fname:8s} {kb:5d} KiB {kind:8s}: naive {naive:7.1f}  plain {a:7.1f} ({naive / a:.2f}x)  pipelined {b:7.1f} "
                  f"({naive / b:.2f}x)  max err {err:.1e}", flush=True)
