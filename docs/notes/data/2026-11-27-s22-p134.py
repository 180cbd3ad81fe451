"""p134 (session 22): single small requests with run()'s short way (StreamPipeline._run_small): pipe.run(t)
of x*2 and of a bf16 MLP, 64 KiB to 4 MiB, pageable torch and NumPy (pinned: the long way, for reference),
against the naive call and the same run forced the long way; the three interleaved call by call, medians of
400 calls, us. Then where the short way's time goes beside the call (its phases wrapped)."""
import time, statistics, collections, functools
import torch, fullpipe as fp
import fullpipe.pipeline.executor as E, fullpipe.pipeline.plain as PL
pool = fp.DevicePool(0, release_threshold="max")
lin = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 1024)).cuda().to(torch.bfloat16).eval()
@torch.inference_mode()
def mlp(x):
    return lin(x.to(torch.bfloat16)).float()
perf = time.perf_counter
def interleaved(fns, n=400):
    for _ in range(20):
        for fn in fns: fn()
    ts = [[] for _ in fns]
    m = len(fns)
    for i in range(n):  # every contender in every position in turn
        for k in [(i + j) % m for j in range(m)]:
            t0 = perf(); fns[k](); ts[k].append(perf() - t0)
    return [statistics.median(t) * 1e6 for t in ts]
print(f"{'compute':8s} {'size':>9s} {'input':8s}  naive   short (x naive)   long (x naive)   short/long")
for fname, f in (("x*2", lambda x: x * 2), ("bf16 MLP", mlp)):
    short = fp.StreamPipeline(f, pool=pool)
    long = fp.StreamPipeline(f, pool=pool)
    long._run_small = lambda x: E._NOT_SMALL
    for kb in (64, 256, 1024, 4096):
        for kind in ("pageable", "numpy", "pinned"):
            t = torch.randn(kb * 256 // 1024, 1024)
            if kind == "pinned": t = t.pin_memory()
            xin = t.numpy() if kind == "numpy" else t
            ref = f(t.cuda()).cpu()
            short.run(xin); long.run(xin)
            ys = short.run(xin)
            took_short = short._stats_later is not None
            assert short.stats.staging["input"] == "plain" and long.stats.staging["input"] == "plain"
            err = float((torch.as_tensor(ys) - ref).abs().max())
            naive, a, b = interleaved([lambda: f(torch.as_tensor(xin).cuda(non_blocking=True)).cpu(),
                                       lambda: short.run(xin), lambda: long.run(xin)])
            print(f"{fname:8s} {kb:6d} KiB {kind:8s} {naive:7.1f}  {a:7.1f} ({naive / a:.2f}x)  {b:7.1f} ({naive / b:.2f}x)"
                  f"  {b / a:5.2f}x  err {err:.1e}{'' if took_short else '  (the long way)'}", flush=True)
    short.close(); long.close()
# ---- the short way's phases (256 KiB pageable torch, x*2)
acc = collections.defaultdict(list)
def timed(name, fn):
    @functools.wraps(fn)
    def w(*a, **k):
        t0 = perf()
        try: return fn(*a, **k)
        finally: acc[name].append((perf() - t0) * 1e6)
    return w
E.host_view = timed("host_view", E.host_view)
PL._host_tensor = timed("_host_tensor", PL._host_tensor)
E.StreamPipeline._run_small = timed("_run_small (all)", E.StreamPipeline._run_small)
E.run_small = timed("run_small", E.run_small)
PL._call = timed("_call (to device, f, checks)", PL._call)
E._pinned_record = timed("_pinned_record", E._pinned_record)
f = lambda x: x * 2
pipe = fp.StreamPipeline(f, pool=pool)
t = torch.randn(64, 1024)
for _ in range(50): pipe.run(t)
acc.clear()
for _ in range(300):
    t0 = perf(); pipe.run(t); acc["pipe.run (all)"].append((perf() - t0) * 1e6)
    t0 = perf(); pipe.stats; acc["pipe.stats (made when read)"].append((perf() - t0) * 1e6)
nv = []
for _ in range(300):
    t0 = perf(); f(t.cuda(non_blocking=True)).cpu(); nv.append((perf() - t0) * 1e6)
acc["naive"] = nv
print("== 256 KiB pageable torch, x*2: the short way's phases, medians us")
for k, v in sorted(acc.items(), key=lambda kv: -statistics.median(kv[1])):
    print(f"  {k:32s} {statistics.median(v):8.1f}")
