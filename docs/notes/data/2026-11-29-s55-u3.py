"""u3: u2's a and c run until their list trials are done; fullpipe as a new user would try it, on workloads in no test (defaults unless said), each checked against a
naive loop and timed beside it (and compute alone where it means something)."""
import random, statistics, sys, time, traceback
import numpy as np
import torch
import fullpipe as fp

dev = torch.device("cuda")
torch.manual_seed(0)
R = {}


def timed(fn, k=5):
    ts = []
    for _ in range(k):
        torch.cuda.synchronize(); t = time.perf_counter(); fn(); torch.cuda.synchronize()
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)


def section(name):
    def deco(fn):
        try:
            t0 = time.perf_counter()
            fn()
            print(f"   ({name}: {time.perf_counter() - t0:.1f} s)", flush=True)
        except Exception:
            print(f"RESULT {name}: FAILED\n" + traceback.format_exc(), flush=True)
        return fn
    return deco


# ---- a: a server's stream of requests through imap (a generator of variable (B, L) int64 token batches)
@section("a imap requests, steady")
def _():
    d, vocab = 512, 32000
    emb = torch.nn.Embedding(vocab, d).to(dev, torch.float16).eval()
    enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(d, 8, 2048, batch_first=True, dropout=0.0),
                                      2, enable_nested_tensor=False).to(dev, torch.float16).eval()

    @torch.inference_mode()
    def f(ids):
        return enc(emb(ids)).mean(dim=1).float()

    rnd = random.Random(3)
    reqs = [torch.randint(0, vocab, (rnd.randint(1, 48), rnd.choice([32, 64, 128, 256, 512]))) for _ in range(120)]
    ref = [f(x.to(dev)).cpu() for x in reqs]
    pipe = fp.StreamPipeline(f)
    got = list(pipe.imap(iter(reqs)))
    err = max(float((g - r).abs().max() / r.abs().max()) for g, r in zip(got, ref))
    same_kind = all(isinstance(g, torch.Tensor) and g.shape == r.shape for g, r in zip(got, ref))
    dx = [x.to(dev) for x in reqs]
    t_alone = timed(lambda: [f(x) for x in dx], 3)
    t_naive = timed(lambda: [f(x.to(dev)).cpu() for x in reqs], 3)
    per = []
    for i in range(16):
        t = time.perf_counter(); list(pipe.imap(iter(reqs))); per.append((time.perf_counter() - t) * 1e3)
        print(f"   a pass {i}: {per[-1]:.1f} ms, last window's path {(pipe.stats.list_path or {})}", flush=True)
    t_fp = statistics.median(per[-6:])
    print(f"RESULT a imap over 120 requests (1-48 x 32-512 tokens, 2-layer fp16 encoder): error {err:.1e}, tensors "
          f"of the right shapes {same_kind}; fullpipe {t_fp:.1f} ms, naive {t_naive:.1f}, compute alone {t_alone:.1f}: "
          f"{t_naive / t_fp:.2f}x naive, {t_alone / t_fp:.2f}x alone; imap_stats {getattr(pipe, 'imap_stats', None)}",
          flush=True)


# ---- c: dict batches (ids + padding mask) through an encoder, run_batches
@section("c dict batches, steady")
def _():
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
    ref = [f({k: v.to(dev) for k, v in b.items()}).cpu() for b in batches]
    pipe = fp.StreamPipeline(f)
    got = pipe.run_batches(batches)
    err = max(float((g - r).abs().max() / r.abs().max()) for g, r in zip(got, ref))
    t_naive = timed(lambda: [f({k: v.to(dev) for k, v in b.items()}).cpu() for b in batches], 3)
    per = []
    for i in range(20):
        t = time.perf_counter(); pipe.run_batches(batches); torch.cuda.synchronize(); per.append((time.perf_counter() - t) * 1e3)
        print(f"   c run {i}: {per[-1]:.1f} ms, {(pipe.stats.list_path or {})}", flush=True)
    t_fp = statistics.median(per[-6:])
    dx = [{k: v.to(dev) for k, v in b.items()} for b in batches]
    t_alone = timed(lambda: [f(b) for b in dx], 3)
    print(f"RESULT c compute alone {t_alone:.1f} ms: fullpipe {t_alone / t_fp:.2f}x alone", flush=True)
    print(f"RESULT c 60 dict batches (ids int32 + bool mask) through an encoder layer: error {err:.1e}; fullpipe "
          f"{t_fp:.1f} ms, naive {t_naive:.1f}: {t_naive / t_fp:.2f}x; list path {(pipe.stats.list_path or {}).get('path')}",
          flush=True)


