"""Session 21: the compute called on one thread of its own (two calls out on it, the enqueueing thread
doing fronts, D2H and bookkeeping) against the inline default and compute_threads=3, on the bench encoder
(d1024), a smaller one (d512), chains of small ops, resnet50 (compute-bound) and the copy-heavy MLP.
Then a many-shape 2-layer encoder's first runs (cold worker caches) and reduce-overhead's outputs."""
import statistics, time, sys
import numpy as np, torch
import fullpipe as fp
from fullpipe.experiments import workloads as W
dev = torch.device("cuda")
gen = torch.Generator().manual_seed(3)
w = W._variable_length(torch, dev, 1024 * 1024, gen, seed=14)
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 6
def make_enc(d, heads, ff):
    with torch.device(dev):
        emb = W._no_grad(torch.nn.Embedding(W.VOCAB, d, dtype=torch.bfloat16))
        layer = W._no_grad(torch.nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, activation="gelu",
                                                            batch_first=True, dtype=torch.bfloat16))
    def f(ids):
        with torch.inference_mode():
            return layer(emb(ids)).float().mean(dim=1)
    return f
def chain(k):
    def f(x):
        with torch.inference_mode():
            for _ in range(k):
                x = x * 1.0001 + 0.5
            return x
    return f
def alone(f, xd):
    def run():
        for x in xd: f(x)
        torch.cuda.synchronize()
    return run
small = [torch.randn(int(n), 256) for n in torch.randint(64, 512, (600,), generator=gen)]
cases = [("enc d1024", w.f, w.xs), ("enc d512", make_enc(512, 8, 2048), w.xs)]
cases += [(f"chain {k} ops", chain(k), small) for k in (4, 24)]
rows = []
def pipes_for(f):
    out = {}
    for name, kw, apart in (("inline", {}, False), ("apart", {}, True), ("ct=3", {"compute_threads": 3}, False)):
        p = fp.StreamPipeline(f, streams=3, **kw)
        p._apart = apart
        out[name] = p
    return out
for name, f, xs in cases:
    xd = [x.to(dev) for x in xs]
    ref = [f(x).cpu() for x in xd]
    ys = [torch.empty_like(r) for r in ref]
    cands = {"alone": alone(f, xd)}
    pipes = pipes_for(f)
    for k, p in pipes.items():
        cands[k] = (lambda p: lambda: p.run_batches(xs, outs=ys))(p)
    for k, c in cands.items():
        c(); c()
        if k != "alone":
            err = max(float((y - r).abs().max()) for y, r in zip(ys, ref))
            assert err < 1e-2, (name, k, err)
    res = {k: [] for k in cands}
    for r in range(rounds):
        for k in (list(cands) if r % 2 == 0 else list(cands)[::-1]):
            torch.cuda.synchronize(); t0 = time.perf_counter(); cands[k](); res[k].append((time.perf_counter() - t0) * 1e3)
    st_i, st_a = pipes["inline"].stats, pipes["apart"].stats
    print(f"== {name}: {len(xs)} batches; inline call {st_i.host_us.get('compute_call', 0):.0f} us enq {st_i.enqueue_us_per_batch:.0f}; "
          f"apart call {st_a.host_us.get('compute_call', 0):.0f} us enq {st_a.enqueue_us_per_batch:.0f} {st_a.compute_threads}; gpu span {st_i.gpu_span_ms:.1f} ms")
    base = statistics.median(res["alone"])
    print("  " + " | ".join(f"{k} {statistics.median(v):.1f} ({base / statistics.median(v):.2f}x)" for k, v in res.items()))
    rows.append((name, {k: statistics.median(v) for k, v in res.items()}))
    for p in pipes.values(): p.close()
# resnet50 compute-bound and the copy-heavy MLP, through the bench's own workload builders
try:
    import torchvision
    for wname, make in (("resnet50", lambda: W._compute_bound(torch, torchvision, dev, 512, gen)),
                        ("mlp copy-heavy", lambda: W._copy_heavy(torch, dev, 256 << 20, gen))):
        wl = make()
        pipes = pipes_for(wl.f)
        cands = {k: (lambda p: lambda: p.run(wl.x, out=wl.out))(p) for k, p in pipes.items()}
        for c in cands.values(): c(); c()
        res = {k: [] for k in cands}
        for r in range(rounds):
            for k in (list(cands) if r % 2 == 0 else list(cands)[::-1]):
                torch.cuda.synchronize(); t0 = time.perf_counter(); cands[k](); res[k].append((time.perf_counter() - t0) * 1e3)
        base = statistics.median(res["inline"])
        print(f"== {wname}: " + " | ".join(f"{k} {statistics.median(v):.1f} ({base / statistics.median(v):.2f}x inline)" for k, v in res.items()))
        rows.append((wname, {k: statistics.median(v) for k, v in res.items()}))
        for p in pipes.values(): p.close()
except Exception as exc:
    import traceback; traceback.print_exc(limit=4)
# many shapes, first runs: inline first (warms the main thread), then apart (a cold worker)
rng = np.random.default_rng(8)
enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(384, 6, 1536, dropout=0.0, batch_first=True),
                                  2, enable_nested_tensor=False).to(dev).half().eval()
xs = [torch.randn(int(rng.integers(1, 24)), int(rng.choice([32, 64, 128, 256])), 384).half() for _ in range(120)]
@torch.inference_mode()
def f_enc(x):
    return enc(x).mean(dim=1).float()
for k in ("inline", "apart"):
    p = fp.StreamPipeline(f_enc, streams=3); p._apart = k == "apart"
    ts = []
    for r in range(3):
        t0 = time.perf_counter(); p.run_batches(xs); torch.cuda.synchronize(); ts.append((time.perf_counter() - t0) * 1e3)
    print(f"many-shape encoder, {k}: runs {[round(t, 1) for t in ts]} ms")
    p.close()
mlp = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU()) for _ in range(12)]).to(dev).half().eval()
cmlp = torch.compile(mlp, mode="reduce-overhead")
fx = [torch.randn(512, 256).half() for _ in range(80)]
@torch.inference_mode()
def f_ro(x):
    return cmlp(x).float().clone()
with torch.inference_mode():
    refro = [mlp(x.to(dev)).float().cpu() for x in fx]
for k in ("inline", "apart"):
    try:
        p = fp.StreamPipeline(f_ro, streams=3); p._apart = k == "apart"
        for r in range(3):
            ys = p.run_batches(fx)
            print(f"reduce-overhead {k} run {r}: max err {max(float((y - q).abs().max()) for y, q in zip(ys, refro)):.2e}")
        p.close()
    except Exception as exc:
        print(f"reduce-overhead {k}: FAILED {type(exc).__name__}: {str(exc)[:200]}")
print("\ncase | alone ms | inline | apart | ct=3  (x of alone; mlp/resnet: x of inline)")
for name, m in rows:
    b = m.get("alone", m["inline"])
    print(f"{name} | {b:.1f} | {b/m['inline']:.2f} | {b/m['apart']:.2f} | {b/m['ct=3']:.2f}")
