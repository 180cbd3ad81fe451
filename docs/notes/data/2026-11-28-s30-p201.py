"""Session 30 (nested tensors off: no sync in the call): batches of several arrays (records.py) on a GPU, a new user's way: padded
requests (ids, padding mask) through a transformer encoder. Alternating rounds, medians:
compute alone (device-resident pairs), the naive loop (.cuda() of each, f, .cpu()),
fullpipe with (ids, mask) records, fullpipe with ids only (mask made inside f from a pad
id: the one-array workaround), and what packing costs per batch on this host."""
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
for _ in range(150):
    b, seq = int(rng.integers(4, 64)), int(rng.choice([32, 64, 128, 256]))
    lengths = torch.from_numpy(rng.integers(1, seq + 1, b))
    pad = torch.arange(seq)[None, :] >= lengths[:, None]
    ids = torch.randint(1, VOCAB, (b, seq), generator=g).masked_fill(pad, PAD)
    reqs.append((ids, pad))
ids_only = [r[0] for r in reqs]
dev = [(i.cuda(), p.cuda()) for i, p in reqs]
ts = torch.cuda.Stream()
def alone():
    with torch.cuda.stream(ts):
        for b in dev: f_pair(b)
    ts.synchronize()
def naive():
    for i, p in reqs: f_pair((i.cuda(), p.cuda())).cpu()
pp, pi = fp.StreamPipeline(f_pair), fp.StreamPipeline(f_ids)
ref = [f_pair((i.cuda(), p.cuda())).cpu() for i, p in reqs]
got = pp.run_batches(reqs); got2 = pi.run_batches(ids_only)
err = max(float((a - b).abs().max()) for a, b in zip(got, ref)); err2 = max(float((a - b).abs().max()) for a, b in zip(got2, ref))
print(f"max abs err vs naive: records {err:.2e}, ids only {err2:.2e}", flush=True)
t0 = time.perf_counter()
for _ in range(5):
    for r in reqs: records.pack(r)
print(f"pack per batch: {(time.perf_counter() - t0) / 5 / len(reqs) * 1e6:.1f} us", flush=True)
V = {"alone": alone, "naive": naive, "fullpipe records": lambda: pp.run_batches(reqs),
     "fullpipe ids only": lambda: pi.run_batches(ids_only), "fullpipe records imap": lambda: list(pp.imap(iter(reqs)))}
for fn in V.values(): fn()
res = {k: [] for k in V}; items = list(V.items())
for r in range(11):
    for k, fn in items[r % len(items):] + items[:r % len(items)]:
        torch.cuda.synchronize(); t0 = time.perf_counter(); fn(); res[k].append((time.perf_counter() - t0) * 1e3)
a = statistics.median(res["alone"]); nv = statistics.median(res["naive"])
for k, v in res.items():
    m = statistics.median(v)
    print(f"  {k:24s} {m:7.1f} ms  {a / m:5.2f}x alone  {nv / m:5.2f}x naive  {[round(x) for x in v]}")
print("records stats:", pp.stats)
