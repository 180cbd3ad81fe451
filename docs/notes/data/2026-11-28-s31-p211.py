"""Session 31: where records' extra host time goes with graph=True (p210: records 50.1 ms
against ids only 41.8 for 120 batches). Per-batch host times from stats, pack_all alone, and
walls, alternating rounds."""
import time, statistics
import numpy as np, torch
import fullpipe as fp
from fullpipe.pipeline import records
VOCAB, D, PAD = 32000, 512, 0
with torch.device("cuda"):
    emb = torch.nn.Embedding(VOCAB, D, dtype=torch.bfloat16).eval()
    enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(D, 8, 2048, dropout=0.0, batch_first=True,
                                      dtype=torch.bfloat16), 2, enable_nested_tensor=False).eval()
@torch.inference_mode()
def f_pair(b):
    ids, pad = b
    h = enc(emb(ids), src_key_padding_mask=pad)
    keep = (~pad).unsqueeze(-1).to(h.dtype)
    return ((h * keep).sum(1) / keep.sum(1)).float()
@torch.inference_mode()
def f_ids(ids):
    return f_pair((ids, ids == PAD))
rng = np.random.default_rng(0); g = torch.Generator().manual_seed(0)
reqs = []
for _ in range(120):
    b, seq = 32, int(rng.choice([64, 128, 256]))
    lengths = torch.from_numpy(rng.integers(1, seq + 1, b))
    pad = torch.arange(seq)[None, :] >= lengths[:, None]
    reqs.append((torch.randint(1, VOCAB, (b, seq), generator=g).masked_fill(pad, PAD), pad))
ids_only = [r[0] for r in reqs]
prg, pig = fp.StreamPipeline(f_pair, graph=True), fp.StreamPipeline(f_ids, graph=True)
p1g = fp.StreamPipeline(lambda b: f_ids(b[0]), graph=True)
V = {"records graph": lambda: prg.run_batches(reqs), "ids graph": lambda: pig.run_batches(ids_only),
     "records graph, one tuple of ids": lambda: p1g.run_batches([(i,) for i in ids_only])}
res = {k: [] for k in V}
for fn in V.values(): fn(); fn()
for r in range(9):
    for k, fn in (list(V.items()) if r % 2 else list(V.items())[::-1]):
        torch.cuda.synchronize(); t0 = time.perf_counter(); fn(); res[k].append((time.perf_counter() - t0) * 1e3)
for k, v in res.items():
    print(f"  {k:34s} {statistics.median(v):7.1f} ms  {[round(x, 1) for x in v]}")
for name, p in (("records", prg), ("ids", pig)):
    p.run_batches(reqs if name == "records" else ids_only)
    print(name, "host_us", {k: round(v, 1) for k, v in p.stats.host_us.items()}, p.stats.staging, flush=True)
t0 = time.perf_counter()
for _ in range(10): records.pack_all(reqs)
print(f"pack_all: {(time.perf_counter() - t0) / 10 / len(reqs) * 1e6:.1f} us a batch")
