"""Session 32: long lists of small batches run plainly (plain.run_small_list: every batch on
the caller's stream, one wait at the end; today only for lists of <= 16 batches) against
pipelined (the default for longer lists), to see whether the plain path should take long
lists of tiny batches too. Forced by raising executor.SMALL_LIST_MAX_BATCHES and
PLAIN_MAX_BYTES for the "plain" pipeline's runs. Alternating rounds, medians; us per batch."""
import random, statistics, time
import numpy as np, torch
import fullpipe as fp
from fullpipe.pipeline import executor as ex

tdev = torch.device("cuda")
with torch.device("cuda"):
    mlp = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).eval()
    emb = torch.nn.Embedding(32000, 1024, dtype=torch.bfloat16).eval()
    layer = torch.nn.TransformerEncoderLayer(1024, 16, 4096, dropout=0.0, activation="gelu", batch_first=True,
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
    bx.append(torch.randint(0, 32000, (b, seq), dtype=torch.int32, generator=g)); tok += b * seq
cases = {"x*2, 400 x 32x512 f32": (double, [torch.randn(32, 512) for _ in range(400)]),
         "MLP, 300 x 4-32 rows": (tiny_f, [torch.randn(int(r), 512) for r in np.random.default_rng(1).integers(4, 33, 300)]),
         "encoder, 127 batches": (enc, bx)}
PLAIN = (1 << 30, 1 << 40)
DEFAULT = (ex.SMALL_LIST_MAX_BATCHES, ex.PLAIN_MAX_BYTES)


def plain_run(pipe, xs):
    ex.SMALL_LIST_MAX_BATCHES, ex.PLAIN_MAX_BYTES = PLAIN
    try:
        return pipe.run_batches(xs)
    finally:
        ex.SMALL_LIST_MAX_BATCHES, ex.PLAIN_MAX_BYTES = DEFAULT


for name, (f, xs) in cases.items():
    dev = [x.to(tdev) for x in xs]
    pp, pl = fp.StreamPipeline(f), fp.StreamPipeline(f)
    ref = [f(x).cpu() for x in dev]
    for p, run in ((pp, lambda: pp.run_batches(xs)), (pl, lambda: plain_run(pl, xs))):
        got = run()
        assert max(float((a.float() - b.float()).abs().max()) for a, b in zip(got, ref)) == 0.0

    def alone(dev=dev, f=f):
        for x in dev:
            f(x)
        torch.cuda.synchronize()
    V = {"alone": alone, "naive": lambda f=f, xs=xs: [f(x.to(tdev)).cpu() for x in xs],
         "pipelined (default)": lambda pp=pp, xs=xs: pp.run_batches(xs),
         "plain (forced)": lambda pl=pl, xs=xs: plain_run(pl, xs)}
    for fn in V.values():
        fn()
    res = {k: [] for k in V}; items = list(V.items())
    for r in range(9):
        for k, fn in items[r % len(items):] + items[:r % len(items)]:
            torch.cuda.synchronize(); t0 = time.perf_counter(); fn(); res[k].append((time.perf_counter() - t0) * 1e3)
    nv = statistics.median(res["naive"])
    print(f"== {name}: plain stats staging {pl.stats.staging}")
    for k, v in res.items():
        m = statistics.median(v)
        print(f"  {k:22s} {m / len(xs) * 1e3:7.1f} us/batch  {nv / m:5.2f}x naive  {[round(x, 1) for x in v]}", flush=True)
