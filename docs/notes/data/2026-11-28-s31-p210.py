"""Session 31: graph=True with batches of several arrays. A 2-layer encoder (bf16 d512, nested
tensors off) over 120 padded (ids, mask) batches of 32 requests x 64/128/256 tokens (3 shapes):
records with graph=True against records without, ids only with and without graphs, compute
alone. Alternating rounds, medians."""
import time, statistics
import numpy as np, torch
import fullpipe as fp

def rounds(V, n=9, base="alone"):
    res = {k: [] for k in V}; items = list(V.items())
    for fn in V.values(): fn()
    for r in range(n):
        for k, fn in items[r % len(items):] + items[:r % len(items)]:
            torch.cuda.synchronize(); t0 = time.perf_counter(); fn(); res[k].append((time.perf_counter() - t0) * 1e3)
    a = statistics.median(res[base])
    for k, v in res.items():
        m = statistics.median(v); print(f"  {k:30s} {m:8.1f} ms  {a / m:5.2f}x {base}   {[round(x) for x in v]}", flush=True)

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
devr = [(i.cuda(), q.cuda()) for i, q in reqs]
ts = torch.cuda.Stream()
def alone():
    with torch.cuda.stream(ts):
        for b in devr: f_pair(b)
    ts.synchronize()
pr, prg = fp.StreamPipeline(f_pair), fp.StreamPipeline(f_pair, graph=True)
pi, pig = fp.StreamPipeline(f_ids), fp.StreamPipeline(f_ids, graph=True)
ref = [f_pair(b).cpu() for b in devr]
for name, p, xs in (("records graph", prg, reqs), ("ids graph", pig, ids_only)):
    err = max(float((a - b).abs().max()) for a, b in zip(p.run_batches(xs), ref))
    print(f"{name}: max abs err vs eager {err:.2e}; stats.graph {p.stats.graph}", flush=True)
rounds({"alone": alone, "records": lambda: pr.run_batches(reqs), "records graph=True": lambda: prg.run_batches(reqs),
        "ids only": lambda: pi.run_batches(ids_only), "ids only graph=True": lambda: pig.run_batches(ids_only)})
print("records graph stats:", prg.stats.staging, prg.stats.graph, flush=True)
