"""Session 32: old code against new, in alternating processes (argv[1]: a label; the code is
whatever PYTHONPATH imports), on the per-batch host time of tensor functions: 400 batches
of x * 2 (32 x 512 float32), 300 tiny MLP batches (4-32 rows), the bench's encoder (127
variable batches), one small request (run and run_batches of one batch). In each process,
alone and naive as references, rounds alternating. argv[2] == "groups": the encoder with
larger groups of back-to-back calls (streams 3/4/8, MAX_CALL_GROUP 8) against alone on as
many streams."""
import random, statistics, sys, time
import numpy as np, torch
import fullpipe as fp
from fullpipe.pipeline import executor as ex

label, what = sys.argv[1], sys.argv[2]
tdev = torch.device("cuda")
with torch.device("cuda"):
    mlp = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).eval()
    VOCAB, D, H, FF = 32000, 1024, 16, 4096
    emb = torch.nn.Embedding(VOCAB, D, dtype=torch.bfloat16).eval()
    layer = torch.nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, activation="gelu", batch_first=True,
                                             dtype=torch.bfloat16).eval()


def double(x):
    return x * 2


def tiny_f(x):
    with torch.inference_mode():
        return mlp(x)


def enc(ids):
    with torch.inference_mode():
        return layer(emb(ids)).float().mean(dim=1)


rnd = random.Random(14); g = torch.Generator().manual_seed(0); bx = []; tok = 0
while tok < 1 << 20:
    seq = rnd.choice((64, 128, 256, 512)); b = max(1, rnd.randint(2048, 16384) // seq)
    bx.append(torch.randint(0, VOCAB, (b, seq), dtype=torch.int32, generator=g)); tok += b * seq
cases = {"double": (double, [torch.randn(32, 512) for _ in range(400)]),
         "tiny": (tiny_f, [torch.randn(int(r), 512) for r in np.random.default_rng(1).integers(4, 33, 300)]),
         "encoder": (enc, bx)}
streams = [torch.cuda.Stream() for _ in range(8)]
default = torch.cuda.default_stream()


def alone_of(f, xs, n):
    dev = [x.to(tdev) for x in xs]

    def run():
        for i, x in enumerate(dev):
            torch.cuda.set_stream(streams[i % n])
            f(x)
        torch.cuda.set_stream(default)
        torch.cuda.synchronize()
    return run


def rounds(V, n):
    for fn in V.values():
        fn(); fn()
    res = {k: [] for k in V}; items = list(V.items())
    for r in range(n):
        for k, fn in items[r % len(items):] + items[:r % len(items)]:
            torch.cuda.synchronize()
            t0 = time.perf_counter(); fn(); res[k].append((time.perf_counter() - t0) * 1e3)
    return {k: statistics.median(v) for k, v in res.items()}


if what == "ab":
    for name, (f, xs) in cases.items():
        pipe = fp.StreamPipeline(f)
        ref = [f(x.to(tdev)).cpu() for x in xs]
        got = pipe.run_batches(xs)
        err = max(float((a.float() - b.float()).abs().max()) for a, b in zip(got, ref))
        assert err == 0.0, (name, err)
        V = {"alone": alone_of(f, xs, 3), "naive": lambda f=f, xs=xs: [f(x.to(tdev)).cpu() for x in xs],
             "fullpipe": lambda pipe=pipe, xs=xs: pipe.run_batches(xs)}
        m = rounds(V, 7 if name != "encoder" else 9)
        n = len(xs)
        print(f"{label:4s} {name:8s} " + "  ".join(f"{k} {v / n * 1e3:6.1f}" for k, v in m.items())
              + f" us/batch; fullpipe {m['alone'] / m['fullpipe']:.3f}x alone {m['naive'] / m['fullpipe']:.3f}x naive"
              + f"; host_us {({k: round(v, 1) for k, v in pipe.stats.host_us.items()})}", flush=True)
        pipe.close()
    one = torch.randn(32, 512)
    p = fp.StreamPipeline(tiny_f)
    R = {"run(x)": lambda: p.run(one), "run_batches([x])": lambda: p.run_batches([one]),
         "naive": lambda: tiny_f(one.to(tdev)).cpu()}
    for fn in R.values():
        for _ in range(30):
            fn()
    res = {k: [] for k in R}
    for r in range(5):
        for k, fn in R.items():
            t0 = time.perf_counter()
            for _ in range(100):
                fn()
            res[k].append((time.perf_counter() - t0) / 100 * 1e6)
    print(f"{label:4s} single   " + "  ".join(f"{k} {statistics.median(v):6.1f}" for k, v in res.items()) + " us",
          flush=True)
else:
    ex.MAX_CALL_GROUP = 8
    f, xs = cases["encoder"]
    pipes = {n: fp.StreamPipeline(f, streams=n) for n in (3, 4, 8)}
    V = {}
    for n, pipe in pipes.items():
        V[f"alone {n} streams"] = alone_of(f, xs, n)
        V[f"fullpipe streams={n}"] = lambda pipe=pipe: pipe.run_batches(xs)
    m = rounds(V, 9)
    a = m["alone 3 streams"]
    for k, v in m.items():
        print(f"{label:4s} groups {k:22s} {v:6.1f} ms {a / v:.3f}x alone-3", flush=True)
    for n, pipe in pipes.items():
        print(f"  streams={n}: call_group {pipe.stats.call_group} host_us "
              f"{({k: round(v, 1) for k, v in pipe.stats.host_us.items()})}")
