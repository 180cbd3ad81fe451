"""Session 21: why a model's call is slower inside fullpipe than alone (chain of 4 small ops: 113 us
against 68 us a batch alone; encoder d512 357 against 260). The call alone on the default stream, on one
side stream, round-robin over 3 streams, with a D2H or H2D beside each; a hand pipeline with one compute
stream and copy streams; fullpipe on 1/2/3 streams, copy_streams, timing=False."""
import statistics, time, sys
import torch
import fullpipe as fp
from fullpipe.experiments import workloads as W
dev = torch.device("cuda")
gen = torch.Generator().manual_seed(3)
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 7
w = W._variable_length(torch, dev, 1024 * 1024, gen, seed=14)
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
small = [torch.randn(int(n), 256) for n in torch.randint(64, 512, (600,), generator=gen)]
S = [torch.cuda.Stream() for _ in range(3)]
def calls(f, xd, ys=None, rr=1, side=True, d2h=False, h2d=None):
    def run():
        for i, x in enumerate(xd):
            if side: torch.cuda.set_stream(S[i % rr])
            if h2d is not None: x = h2d[i].to(dev, non_blocking=True)
            y = f(x)
            if d2h: ys[i].copy_(y, non_blocking=True)
        torch.cuda.set_stream(torch.cuda.default_stream())
        torch.cuda.synchronize()
    return run
def hand(f, xp, ys):
    """H2D on one copy stream, every compute on one stream, D2H on another; events between."""
    hs, cs, ds = S
    def run():
        evs = []
        for i, x in enumerate(xp):
            with torch.cuda.stream(hs):
                xd = x.to(dev, non_blocking=True); e = torch.cuda.Event(); e.record(hs)
            cs.wait_event(e)
            with torch.cuda.stream(cs):
                y = f(xd); e2 = torch.cuda.Event(); e2.record(cs)
            ds.wait_event(e2)
            with torch.cuda.stream(ds):
                ys[i].copy_(y, non_blocking=True)
            xd.record_stream(cs); y.record_stream(ds)
        torch.cuda.synchronize()
    return run
cases = [("enc d512", make_enc(512, 8, 2048), w.xs), ("chain 4 ops", chain(4), small), ("enc d1024", w.f, w.xs)]
table = []
for name, f, xs in cases:
    xd = [x.to(dev) for x in xs]
    xp = [x.pin_memory() for x in xs]
    ref = [f(x).cpu() for x in xd]
    ys = [torch.empty_like(r).pin_memory() for r in ref]
    yp = [torch.empty_like(r) for r in ref]
    cands = {"alone default stream": calls(f, xd, side=False), "alone 1 side stream": calls(f, xd),
             "alone rr 3 streams": calls(f, xd, rr=3), "alone 1 stream + D2H": calls(f, xd, ys, d2h=True),
             "alone rr 3 + D2H": calls(f, xd, ys, rr=3, d2h=True), "1 stream H2D+f+D2H": calls(f, xd, ys, d2h=True, h2d=xp),
             "hand: 1 compute stream, copy streams": hand(f, xp, ys)}
    pipes = {}
    for k, kw in (("fp 3 streams", {}), ("fp 2 streams", {"streams": 2}), ("fp 1 stream", {"streams": 1}),
                  ("fp copy_streams", {"copy_streams": True}), ("fp timing=False", {"timing": False})):
        p = pipes[k] = fp.StreamPipeline(f, **kw)
        cands[k] = (lambda p: lambda: p.run_batches(xs, outs=yp))(p)
    for c in cands.values(): c(); c()
    res = {k: [] for k in cands}
    for r in range(rounds):
        for k in (list(cands) if r % 2 == 0 else list(cands)[::-1]):
            torch.cuda.synchronize(); t0 = time.perf_counter(); cands[k](); res[k].append((time.perf_counter() - t0) * 1e3)
    base = statistics.median(res["alone default stream"])
    print(f"== {name}: {len(xs)} batches")
    for k, v in res.items():
        m = statistics.median(v)
        extra = ""
        if k in pipes:
            st = pipes[k].stats
            extra = f"  call {st.host_us.get('compute_call', 0):.0f} us, enq {st.enqueue_us_per_batch:.0f} us/batch, gpu span {st.gpu_span_ms:.1f}"
        print(f"  {k:38s} {m:8.2f} ms  {1e3 * m / len(xs):7.1f} us/batch  {base / m:5.2f}x{extra}")
    for p in pipes.values(): p.close()
