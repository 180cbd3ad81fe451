"""p132 (session 22): the host-bound encoder's call inside fullpipe against the same call in loops that
add fullpipe's differences one at a time (its own wrapped streams, inputs as views of an external tensor,
a driver D2H per batch), with every call timed (median, mean, p90, max) so that a few long stalls and a
uniform slowdown can be told apart; then torch.profiler of the loop closest to fullpipe against fullpipe,
op by op (host time per batch)."""
import statistics, time, sys, threading, collections
import numpy as np
import torch
import fullpipe as fp
from fullpipe.experiments import workloads as W
from fullpipe.cuda.memory import DeviceArray
from fullpipe.cuda.interop import as_torch
from cuda.bindings import driver as cu

perf = time.perf_counter
dev = torch.device("cuda")
gen = torch.Generator().manual_seed(3)
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
w = W._variable_length(torch, dev, 1024 * 1024, gen, seed=14)
default = torch.cuda.current_stream()


def make_enc(d, heads, ff):
    with torch.device(dev):
        emb = W._no_grad(torch.nn.Embedding(W.VOCAB, d, dtype=torch.bfloat16))
        layer = W._no_grad(torch.nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, activation="gelu",
                                                            batch_first=True, dtype=torch.bfloat16))

    def f(ids):
        with torch.inference_mode():
            return layer(emb(ids)).float().mean(dim=1)
    return f


class Timed:
    def __init__(self, f):
        self.f, self.t, self.threads = f, [], None

    def __call__(self, x):
        t0 = perf()
        y = self.f(x)
        self.t.append(perf() - t0)
        if len(self.t) == 60 and self.threads is None:
            self.threads = sorted(t.name for t in threading.enumerate())
        return y


def loop(tf, xs, streams=None, d2h=None):
    def run():
        for i, x in enumerate(xs):
            if streams is not None:
                torch.cuda.set_stream(streams[i % len(streams)])
            y = tf(x)
            if d2h is not None:
                d2h(i, y)
        torch.cuda.set_stream(default)
        torch.cuda.synchronize()
    return run


for name, f in (("enc d512", make_enc(512, 8, 2048)), ("enc d1024", w.f)):
    xs = w.xs
    xd = [x.to(dev) for x in xs]
    flat = torch.cat([x.reshape(-1) for x in xd])
    ext = as_torch(DeviceArray(flat.data_ptr(), (flat.numel(),), np.int32, owner=flat, device_index=0))
    views, off = [], 0
    for x in xd:
        views.append(ext.as_strided(x.shape, x.stride(), off))
        off += x.numel()
    with torch.inference_mode():
        ref = [f(x) for x in xd]
    pin = [torch.empty(r.shape, dtype=r.dtype).pin_memory() for r in ref]
    host = [torch.empty(r.shape, dtype=r.dtype) for r in ref]

    def drv_d2h(i, y):
        cu.cuMemcpyDtoHAsync(pin[i].data_ptr(), y.data_ptr(), y.nbytes, torch.cuda.current_stream().cuda_stream)

    torch3 = [torch.cuda.Stream() for _ in range(3)]
    timed = {}
    pipes = {}
    for label, kw in (("fullpipe", {}), ("fullpipe timing=False", {"timing": False})):
        tf = timed[label] = Timed(f)
        p = pipes[label] = fp.StreamPipeline(tf, form="torch", **kw)
    pipes["fullpipe"].run_batches(xs, outs=host)
    fp3 = list(pipes["fullpipe"]._tc._fs)
    cands = {}
    for label, streams, inputs, d2h in (("alone default stream", None, xd, None),
                                        ("alone torch 3 streams rr", torch3, xd, None),
                                        ("alone fp's 3 streams rr", fp3, xd, None),
                                        ("fp streams + external views", fp3, views, None),
                                        ("fp streams + ext views + drv D2H", fp3, views, drv_d2h)):
        tf = timed[label] = Timed(f)
        cands[label] = loop(tf, inputs, streams, d2h)
    for label, p in pipes.items():
        cands[label] = (lambda p: lambda: p.run_batches(xs, outs=host))(p)
    for c in cands.values():
        c(); c()
    for t in timed.values():
        t.t.clear(); t.threads = None
    res = {k: [] for k in cands}
    order = list(cands)
    for r in range(rounds):
        rot = order[r % len(order):] + order[:r % len(order)]
        for k in (rot if r % 2 == 0 else rot[::-1]):
            torch.cuda.synchronize()
            t0 = perf()
            cands[k]()
            res[k].append((perf() - t0) * 1e6 / len(xs))
    base = statistics.median(res["alone default stream"])
    print(f"== {name}: {len(xs)} batches; us per batch; call: host us per call (median / mean / p90 / max)")
    for k, v in res.items():
        m = statistics.median(v)
        ts = sorted(1e6 * t for t in timed[k].t)
        p90 = ts[int(0.9 * len(ts))]
        extra = ""
        if k in pipes:
            st = pipes[k].stats
            extra = f"  host_us { {a: round(b, 1) for a, b in st.host_us.items()} }"
        print(f"   {k:34s} {m:7.1f} ({base / m:.3f}x)  call {statistics.median(ts):6.1f} / {statistics.fmean(ts):6.1f} / "
              f"{p90:6.1f} / {ts[-1]:7.1f}{extra}")
    print("   threads during a fullpipe run:", timed["fullpipe"].threads)

    # ---- op by op: the closest loop against fullpipe, host time per batch
    from torch.profiler import profile, ProfilerActivity
    tabs = {}
    for k in ("fp streams + ext views + drv D2H", "fullpipe"):
        cands[k]()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            cands[k]()
        tabs[k] = {e.key: (e.self_cpu_time_total / len(xs), e.count / len(xs)) for e in prof.key_averages()}
    a, b = tabs["fp streams + ext views + drv D2H"], tabs["fullpipe"]
    keys = sorted(set(a) | set(b), key=lambda k: -abs(b.get(k, (0, 0))[0] - a.get(k, (0, 0))[0]))
    tot_a = sum(v[0] for v in a.values()); tot_b = sum(v[0] for v in b.values())
    print(f"   profiler: self CPU us per batch, loop {tot_a:.1f} vs fullpipe {tot_b:.1f}; largest differences:")
    for k in keys[:18]:
        ua, ca = a.get(k, (0, 0)); ub, cb = b.get(k, (0, 0))
        print(f"     {k[:48]:48s} loop {ua:7.2f} ({ca:4.1f}/b)  fullpipe {ub:7.2f} ({cb:4.1f}/b)  diff {ub - ua:+7.2f}")
    for p in pipes.values():
        p.close()
