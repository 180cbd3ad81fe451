"""p393: does fullpipe's background Python slow a host-bound model's calls (GIL hand-offs)?
Per workload, alternating rounds: compute alone (f over device batches), alone with a noise thread woken once a
call (~N us of Python), alone with a spinning thread, the naive loop, fullpipe defaults, compute_threads=1, and
compute_threads=1 with the default 5 ms switch interval. Each f wrapped to time its own calls."""
import contextlib, json, os, queue, random, statistics, sys, threading, time
import torch
import fullpipe as fp
import fullpipe.pipeline.executor as fexec

dev = torch.device("cuda")
torch.manual_seed(0)
OUT = os.environ.get("OUT", "/tmp")
ROUNDS = int(os.environ.get("ROUNDS", "8"))


class Timed:
    def __init__(self, f):
        self.f, self.s, self.n = f, 0.0, 0

    def __call__(self, x):
        t = time.perf_counter()
        y = self.f(x)
        self.s += time.perf_counter() - t
        self.n += 1
        return y

    def take(self):
        r = (self.s / self.n * 1e6) if self.n else float("nan")
        self.s, self.n = 0.0, 0
        return r


def dict_workload():
    d = 256
    emb = torch.nn.Embedding(1000, d).to(dev).eval()
    layer = torch.nn.TransformerEncoderLayer(d, 4, 1024, batch_first=True, dropout=0.0).to(dev).eval()

    @torch.inference_mode()
    def f(b):
        h = layer(emb(b["ids"]), src_key_padding_mask=~b["mask"])
        m = b["mask"].unsqueeze(-1).float()
        return (h * m).sum(1) / m.sum(1)
    rnd = random.Random(5)
    batches = []
    for _ in range(60):
        B, L = rnd.randint(2, 32), rnd.choice([16, 64, 128])
        lens = torch.randint(1, L + 1, (B,))
        mask = torch.arange(L)[None, :] < lens[:, None]
        batches.append({"ids": torch.randint(0, 1000, (B, L), dtype=torch.int32), "mask": mask})
    return f, batches, lambda b: {k: v.to(dev) for k, v in b.items()}


def varlen_workload(d_model=1024, heads=16, d_ff=4096, tokens_total=256 * 1024, lo_hi=(2048, 16384)):
    with torch.device(dev):
        emb = torch.nn.Embedding(32000, d_model, dtype=torch.bfloat16).eval()
        layer = torch.nn.TransformerEncoderLayer(d_model, heads, d_ff, dropout=0.0, activation="gelu",
                                                 batch_first=True, dtype=torch.bfloat16).eval()

    def f(ids):
        with torch.inference_mode():
            return layer(emb(ids)).float().mean(dim=1)
    rnd = random.Random(1)
    g = torch.Generator().manual_seed(1)
    xs, tokens = [], 0
    while tokens < tokens_total:
        seq = rnd.choice((64, 128, 256, 512))
        b = max(1, rnd.randint(*lo_hi) // seq)
        xs.append(torch.randint(0, 32000, (b, seq), dtype=torch.int32, generator=g))
        tokens += b * seq
    return f, xs, lambda t: t.to(dev)


def noise_thread(q, us):
    def loop():
        while True:
            item = q.get()
            if item is None:
                return
            t = time.perf_counter()
            while (time.perf_counter() - t) * 1e6 < us:
                pass
    th = threading.Thread(target=loop, daemon=True)
    th.start()
    return th


def main():
    which = sys.argv[1:] or ["dict", "varlen", "varlen_small"]
    results = {}
    real_switch = fexec.short_switch_interval
    for name in which:
        if name == "dict":
            f0, xs, to_dev = dict_workload()
        elif name == "varlen":
            f0, xs, to_dev = varlen_workload()
        else:
            f0, xs, to_dev = varlen_workload(256, 4, 1024, 64 * 1024, (512, 4096))
        f = Timed(f0)
        dx = [to_dev(b) for b in xs]
        for b in dx:
            f(b)
        torch.cuda.synchronize()
        pipes = {"fp default": fp.StreamPipeline(f), "fp threads=1": fp.StreamPipeline(f, compute_threads=1)}
        for p in pipes.values():
            for _ in range(30):
                p.run_batches(xs)
        torch.cuda.synchronize()
        f.take()
        q = queue.Queue()

        def alone():
            for b in dx:
                f(b)

        def alone_noise(us):
            def run():
                th = noise_thread(q, us)
                for b in dx:
                    f(b)
                    q.put(1)
                q.put(None)
                th.join()
            return run

        def naive():
            for b in xs:
                f(to_dev(b)).cpu()

        def fp_run(p, keep_switch=False):
            def run():
                if keep_switch:
                    fexec.short_switch_interval = lambda *a, **k: contextlib.nullcontext()
                try:
                    p.run_batches(xs)
                finally:
                    fexec.short_switch_interval = real_switch
            return run
        ways = [("alone", alone), ("alone+noise10", alone_noise(10)), ("alone+noise40", alone_noise(40)),
                ("naive", naive),
                ("fp default", fp_run(pipes["fp default"])), ("fp threads=1", fp_run(pipes["fp threads=1"])),
                ("fp threads=1 5ms", fp_run(pipes["fp threads=1"], True))]
        ts = {k: [] for k, _ in ways}
        calls = {k: [] for k, _ in ways}
        extra = {}
        for r in range(ROUNDS):
            order = ways[r % len(ways):] + ways[:r % len(ways)]
            for k, fn in order:
                torch.cuda.synchronize()
                f.take()
                t = time.perf_counter()
                fn()
                torch.cuda.synchronize()
                ts[k].append((time.perf_counter() - t) * 1e3)
                calls[k].append(f.take())
                if k.startswith("fp"):
                    st = pipes["fp default" if k == "fp default" else "fp threads=1"].stats
                    extra[k] = {"path": (st.list_path or {}).get("path"),
                                "host_us": {a: round(b, 1) for a, b in (st.host_us or {}).items()},
                                "staging": st.staging, "wall_ms": round(st.wall_ms, 2)}
        m = {k: statistics.median(v) for k, v in ts.items()}
        c = {k: statistics.median(v) for k, v in calls.items()}
        results[name] = {"batches": len(xs), "ms": m, "call_us": c, "extra": extra}
        print(f"== {name}: {len(xs)} batches", flush=True)
        for k in m:
            print(f"  {k:18s} {m[k]:8.2f} ms  {m['alone'] / m[k]:.3f}x alone  f {c[k]:7.1f} us/call "
                  f"({c[k] / c['alone']:.3f}x alone's)  {extra.get(k, '')}", flush=True)
        for p in pipes.values():
            p.close() if hasattr(p, "close") else None
    with open(os.path.join(OUT, "p393.json"), "w") as fh:
        json.dump(results, fh, indent=1)


main()
