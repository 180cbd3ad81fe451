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


