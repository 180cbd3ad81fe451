"""p133 (session 22): which of fullpipe's own pieces slow a host-bound run_batches (the variable-length
encoders): fullpipe with its defaults against the same with one piece changed at a time (no timing events;
no early drain of outputs on the copier's threads; early drain done inline; every input copied before the
first H2D), compute alone beside; alternating rotated rounds, medians; every call's host time."""
import contextlib, statistics, time, sys, threading
import torch
import fullpipe as fp
from fullpipe.experiments import workloads as W
import fullpipe.pipeline.bulk as B
import fullpipe.pipeline.pageable as PG

perf = time.perf_counter
dev = torch.device("cuda")
gen = torch.Generator().manual_seed(3)
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 7
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
        self.f, self.t = f, []

    def __call__(self, x):
        t0 = perf()
        y = self.f(x)
        self.t.append(perf() - t0)
        return y


@contextlib.contextmanager
def patched(obj, name, value):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def inline_submit(self, copies):
    from concurrent.futures import Future
    done = Future(); PG._copy_each(copies); done.set_result(None)
    return [done]


VARIANTS = {  # label: (StreamPipeline kwargs, patches)
    "fullpipe defaults": ({}, []),
    "timing=False": ({"timing": False}, []),
    "no early drain": ({}, [(B, "DRAIN_GROUP_BYTES", 1 << 62)]),
    "early drain inline": ({}, [(PG.HostCopier, "submit_many", inline_submit)]),
    "inputs all first": ({}, [(B, "FIRST_INPUT_BYTES", 1 << 62)]),
    "no early drain, inputs first": ({}, [(B, "DRAIN_GROUP_BYTES", 1 << 62), (B, "FIRST_INPUT_BYTES", 1 << 62)]),
}

for name, f in (("enc d512", make_enc(512, 8, 2048)), ("enc d1024", w.f)):
    xs = w.xs
    xd = [x.to(dev) for x in xs]
    host = [torch.empty(x.shape[0], f(xd[0]).shape[1]) for x in xs]
    timed, cands, pipes = {}, {}, {}

    def alone(tf):
        def run():
            for x in xd:
                tf(x)
            torch.cuda.synchronize()
        return run
    timed["compute alone"] = Timed(f)
    cands["compute alone"] = alone(timed["compute alone"])
    for label, (kw, patches) in VARIANTS.items():
        tf = timed[label] = Timed(f)
        p = pipes[label] = fp.StreamPipeline(tf, form="torch", **kw)

        def run(p=p, patches=patches):
            with contextlib.ExitStack() as es:
                for obj, attr, val in patches:
                    es.enter_context(patched(obj, attr, val))
                p.run_batches(xs, outs=host)
        cands[label] = run
    for c in cands.values():
        c(); c()
    for t in timed.values():
        t.t.clear()
    res = {k: [] for k in cands}
    order = list(cands)
    for r in range(rounds):
        rot = order[r % len(order):] + order[:r % len(order)]
        for k in (rot if r % 2 == 0 else rot[::-1]):
            torch.cuda.synchronize()
            t0 = perf()
            cands[k]()
            res[k].append((perf() - t0) * 1e6 / len(xs))
    base = statistics.median(res["compute alone"])
    print(f"== {name}: {len(xs)} batches; us per batch (x compute alone); call host us median / mean / p90")
    for k, v in res.items():
        m = statistics.median(v)
        ts = sorted(1e6 * t for t in timed[k].t)
        extra = ""
        if k in pipes:
            st = pipes[k].stats
            extra = (f"  host_us { {a: round(b, 1) for a, b in st.host_us.items()} } staging {st.staging}")
        print(f"   {k:30s} {m:7.1f} ({base / m:.3f}x)  call {statistics.median(ts):6.1f} / {statistics.fmean(ts):6.1f} / "
              f"{ts[int(0.9 * len(ts))]:6.1f}{extra}")
    for p in pipes.values():
        p.close()
