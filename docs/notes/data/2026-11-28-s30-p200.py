"""Session 30: the call on ONE other thread (calls in batch order, never two at once)
against the call on the enqueueing thread (defaults) and compute_threads=2/3. Emulated:
compute_threads=2 whose two job queues are one worker's (so 2 calls out, run one after
another by one thread). Workloads: the bench's variable-length encoder, a tiny MLP list,
a GRU, x*2. Alternating rounds in one process; medians."""
import time, statistics, random, queue, threading
import numpy as np, torch
import fullpipe as fp
from fullpipe.pipeline import compute_threads as ct

class OneWorker:
    def __init__(self):
        self.q = queue.SimpleQueue()
        threading.Thread(target=ct._serve, args=(self.q,), daemon=True).start()
    def ensure(self, n): return [self.q] * n
    threads = 1
ONE = OneWorker(); SHARED = ct._WORKERS

def with_one(p):
    def go(xs):
        ct._WORKERS = ONE
        try:
            return p.run_batches(xs)
        finally:
            ct._WORKERS = SHARED
    return go

def rounds(cands, n):
    res = {k: [] for k in cands}; items = list(cands.items())
    for fn in cands.values(): fn()
    for r in range(n):
        for k, fn in items[r % len(items):] + items[:r % len(items)]:
            torch.cuda.synchronize()
            t0 = time.perf_counter(); fn(); res[k].append((time.perf_counter() - t0) * 1e3)
    return {k: statistics.median(v) for k, v in res.items()}, res

tdev = torch.device("cuda"); ts = torch.cuda.Stream()
def case(name, f, batches, n=9, streams=3):
    ref = [f(x.to(tdev)).cpu() for x in batches]
    dev = [x.to(tdev) for x in batches]
    def alone():
        with torch.cuda.stream(ts):
            for x in dev: f(x)
        ts.synchronize()
    def naive():
        for x in batches: f(x.to(tdev)).cpu()
    p1 = fp.StreamPipeline(f, streams=streams)
    p2 = fp.StreamPipeline(f, streams=streams, compute_threads=2)
    p3 = fp.StreamPipeline(f, streams=max(3, streams), compute_threads=3)
    po = fp.StreamPipeline(f, streams=streams, compute_threads=2)
    po3 = fp.StreamPipeline(f, streams=4, compute_threads=3)
    V = {"alone": alone, "naive": naive, "default": lambda: p1.run_batches(batches),
         "ct2": lambda: p2.run_batches(batches), "ct3": lambda: p3.run_batches(batches),
         "one worker, 2 out": lambda: with_one(po)(batches), "one worker, 3 out (4 st)": lambda: with_one(po3)(batches)}
    for k in ("default", "ct2", "one worker, 2 out"):
        got = V[k]() if k != "one worker, 2 out" else with_one(po)(batches)
        err = max(float((g.float() - r.float()).abs().max() / (r.float().abs().max() + 1e-6)) for g, r in zip(got, ref))
        assert err < 2e-2, (name, k, err)
    med, raw = rounds(V, n)
    a = med["alone"]
    print(f"== {name} ({len(batches)} batches)")
    for k, v in med.items():
        print(f"  {k:26s} {v:8.1f} ms  {a / v:5.2f}x alone  {med['naive'] / v:5.2f}x naive   {[round(x) for x in raw[k]]}")
    print("  default stats host_us", {k: round(v) for k, v in p1.stats.host_us.items()}, "one-worker compute_threads", po.stats.compute_threads, flush=True)

VOCAB, D, H, FF = 32000, 1024, 16, 4096
with torch.device("cuda"):
    emb = torch.nn.Embedding(VOCAB, D, dtype=torch.bfloat16).eval()
    layer = torch.nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, activation="gelu", batch_first=True,
                                             dtype=torch.bfloat16).eval()
def enc(ids):
    with torch.inference_mode():
        return layer(emb(ids)).float().mean(dim=1)
rnd = random.Random(14); g = torch.Generator().manual_seed(0); bx = []; tok = 0
while tok < 1 << 20:
    seq = rnd.choice((64, 128, 256, 512)); b = max(1, rnd.randint(2048, 16384) // seq)
    bx.append(torch.randint(0, VOCAB, (b, seq), dtype=torch.int32, generator=g)); tok += b * seq
case("encoder (bench variable-length)", enc, bx, n=11)

with torch.device("cuda"):
    mlp = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).eval()
def mlpf(x):
    with torch.inference_mode():
        return mlp(x)
tiny = [torch.randn(int(r), 512) for r in np.random.default_rng(1).integers(4, 33, 300)]
case("tiny MLP 512-2048-512, 4-32 rows", mlpf, tiny)

with torch.device("cuda"):
    gru = torch.nn.GRU(256, 512, num_layers=2, batch_first=True).eval()
def gruf(x):
    with torch.inference_mode():
        return gru(x)[0][:, -1]
rg = np.random.default_rng(2)
gb = [torch.randn(int(rg.integers(8, 65)), int(rg.integers(32, 129)), 256) for _ in range(40)]
case("GRU 2x512 over 8-64 seqs x 32-128 steps", gruf, gb, n=5)

with torch.device("cuda"):
    l2 = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(512, 8, 2048, dropout=0.0, batch_first=True), 4).eval().half()
def enc4(x):
    with torch.inference_mode():
        return l2(x.cuda().half() if False else x.half()).float()[:, 0]
eb = [torch.randn(int(rg.integers(2, 17)), int(rg.choice([32, 64, 128])), 512) for _ in range(120)]
case("4-layer encoder d512, small batches", enc4, eb)
