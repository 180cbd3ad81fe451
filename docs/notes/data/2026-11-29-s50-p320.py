"""p320: a new user's tour of gemm(variant="hopper") on the Linear layers of real models
(shapes from their configs), as F.linear(x, w) = gemm(x, w.T): per shape the first call's wall
(plan + compile), the relative error against an fp32 product, eager calls (host + device, 30 in a
row, events) and device time (CUDA graph of 10 launches, 3 alternating rounds), beside F.linear
on the same tensors. Writes p320.json."""
import json, math, os, statistics, sys, time
import torch
import torch.nn.functional as F
from fullpipe.kernels import gemm

MODELS = {  # name: [(layer, K, N)]  (fused q/k/v and gate/up as serving stacks run them)
    "llama3-8b": [("qkv", 4096, 6144), ("o", 4096, 4096), ("gate_up", 4096, 28672), ("down", 14336, 4096),
                  ("lm_head", 4096, 128256)],
    "llama2-7b": [("qkv", 4096, 12288), ("gate_up", 4096, 22016), ("down", 11008, 4096), ("lm_head", 4096, 32000)],
    "qwen2-7b": [("qkv", 3584, 4608), ("o", 3584, 3584), ("gate_up", 3584, 37888), ("down", 18944, 3584),
                 ("lm_head", 3584, 152064)],
    "phi3-mini": [("qkv", 3072, 9216), ("gate_up", 3072, 16384), ("down", 8192, 3072), ("lm_head", 3072, 32064)],
    "gpt2": [("c_attn", 768, 2304), ("c_proj", 768, 768), ("c_fc", 768, 3072), ("mlp_proj", 3072, 768),
             ("lm_head", 768, 50257)],
}
TOKENS = [int(t) for t in os.environ.get("P320_TOKENS", "1,16,200,2048,8192").split(",")]
VIT = [("vit-b16 x32", l, 32 * 197, k, n) for l, k, n in
       [("qkv", 768, 2304), ("proj", 768, 768), ("fc1", 768, 3072), ("fc2", 3072, 768)]]

cases = [(mod, l, m, k, n) for mod, ls in MODELS.items() for m in TOKENS for l, k, n in ls
         if not (l == "lm_head" and m > 2048)] + VIT
stream = torch.cuda.current_stream()


def graph(fn, n=10):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    g.replay(); torch.cuda.synchronize()
    return g


def timed(run, n):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); run(); b.record(); b.synchronize()
    return a.elapsed_time(b) / n * 1e3


results = []
t0 = time.perf_counter()
for mod, layer, m, k, n in cases:
    dt = torch.bfloat16
    torch.manual_seed(m * 7 + n)
    x = torch.randn(m, k, device="cuda", dtype=dt)
    w = torch.randn(n, k, device="cuda", dtype=dt) / math.sqrt(k)
    row = dict(model=mod, layer=layer, m=m, k=k, n=n)
    try:
        torch.cuda.synchronize(); t = time.perf_counter()
        y = gemm(x, w.T, variant="hopper", stream=stream)
        torch.cuda.synchronize(); row["first_s"] = time.perf_counter() - t
    except Exception as e:  # the user's view: what it says
        row["error"] = f"{type(e).__name__}: {e}"
        print(f"{mod:12} {layer:8} {m:5}x{n:6}x{k:5}  {row['error']}", flush=True)
        results.append(row)
        continue
    ref = x.float() @ w.float().T
    y.fill_(float("nan")); gemm(x, w.T, variant="hopper", stream=stream, out=y)
    row["err"] = ((y.float() - ref).norm() / ref.norm()).item()
    del ref
    out = torch.empty_like(y)
    fns = {"fullpipe": lambda: gemm(x, w.T, variant="hopper", stream=torch.cuda.current_stream(), out=out),
           "torch": lambda: torch.matmul(x, w.T, out=out)}
    eager = {nm: [] for nm in fns}
    dev = {nm: [] for nm in fns}
    gs = {nm: graph(fn) for nm, fn in fns.items()}
    for r in range(3):
        for nm in (list(fns) if r % 2 else list(fns)[::-1]):
            fn = fns[nm]
            eager[nm].append(timed(lambda: [fn() for _ in range(30)], 30))
            dev[nm].append(timed(gs[nm].replay, 10))
    del gs
    for nm, fn in fns.items():  # the caller's thread per call (enqueue only; 100 calls queue without blocking)
        torch.cuda.synchronize(); t = time.perf_counter()
        for _ in range(100):
            fn()
        row[f"{nm}_host_us"] = (time.perf_counter() - t) / 100 * 1e6
        torch.cuda.synchronize()
    for nm in fns:
        row[f"{nm}_eager_us"] = statistics.median(eager[nm])
        row[f"{nm}_dev_us"] = statistics.median(dev[nm])
    results.append(row)
    tf = 2 * m * n * k / row["fullpipe_dev_us"] / 1e6
    print(f"{mod:12} {layer:8} {m:5}x{n:6}x{k:5} err {row['err']:.1e} first {row['first_s']:6.3f}s "
          f"dev {row['fullpipe_dev_us']:8.1f} vs {row['torch_dev_us']:8.1f} us ({row['torch_dev_us'] / row['fullpipe_dev_us']:.3f}x, {tf:5.0f} TF) "
          f"eager {row['fullpipe_eager_us']:8.1f} vs {row['torch_eager_us']:8.1f} ({row['torch_eager_us'] / row['fullpipe_eager_us']:.3f}x) host {row['fullpipe_host_us']:5.1f} vs {row['torch_host_us']:5.1f} us",
          flush=True)
    if time.perf_counter() - t0 > float(os.environ.get("P320_BUDGET_S", 200)):
        print("budget reached", flush=True)
        break
gm = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")
ok = [r for r in results if "err" in r]
for band, sel in (("decode M<=16", lambda r: r["m"] <= 16), ("M 200", lambda r: r["m"] == 200),
                  ("M>=2048", lambda r: r["m"] >= 2048)):
    rs = [r for r in ok if sel(r)]
    if rs:
        d = [r["torch_dev_us"] / r["fullpipe_dev_us"] for r in rs]
        e = [r["torch_eager_us"] / r["fullpipe_eager_us"] for r in rs]
        print(f"{band:14} {len(rs):3} shapes: device x torch gm {gm(d):.3f} (min {min(d):.3f}), eager gm {gm(e):.3f} (min {min(e):.3f})")
print(f"max err {max(r['err'] for r in ok):.2e}; errors {sum('error' in r for r in results)}; "
      f"first call max {max(r['first_s'] for r in ok):.2f}s; total {time.perf_counter() - t0:.0f}s")
json.dump(dict(gpu=torch.cuda.get_device_name(0), results=results), open(os.environ.get("OUT", ".") + "/p320.json", "w"), indent=1)
