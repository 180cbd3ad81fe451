"""Session 31: imap of batches of several arrays, A/B in one process: the reader finds the
layout and the window's run gathers the fields (new) against the reader filling each
batch's host block (session 30's way, emulated by packing in the iterable, which the reader
runs). Small fields (encoder ids + mask) and large (resnet18 images + labels, pageable).
Alternating rounds, medians."""
import time, statistics
import numpy as np, torch, torchvision
import fullpipe as fp
from fullpipe.pipeline import records

def rounds(V, n=11, base="alone"):
    res = {k: [] for k in V}; items = list(V.items())
    for fn in V.values(): fn()
    for r in range(n):
        for k, fn in items[r % len(items):] + items[:r % len(items)]:
            torch.cuda.synchronize(); t0 = time.perf_counter(); fn(); res[k].append((time.perf_counter() - t0) * 1e3)
    a = statistics.median(res[base])
    for k, v in res.items():
        m = statistics.median(v); print(f"  {k:36s} {m:8.1f} ms  {a / m:5.2f}x {base}   {[round(x) for x in v]}", flush=True)

ts = torch.cuda.Stream()
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
rng = np.random.default_rng(0); g = torch.Generator().manual_seed(0)
reqs = []
for _ in range(150):
    b, seq = int(rng.integers(4, 64)), int(rng.choice([32, 64, 128, 256]))
    lengths = torch.from_numpy(rng.integers(1, seq + 1, b))
    pad = torch.arange(seq)[None, :] >= lengths[:, None]
    reqs.append((torch.randint(1, VOCAB, (b, seq), generator=g).masked_fill(pad, PAD), pad))
devr = [(i.cuda(), q.cuda()) for i, q in reqs]
def alone_e():
    with torch.cuda.stream(ts):
        for b in devr: f_pair(b)
    ts.synchronize()
pe = fp.StreamPipeline(f_pair)
refe = [f_pair((i.cuda(), q.cuda())).cpu() for i, q in reqs]
err = max(float((a - b).abs().max()) for a, b in zip(pe.imap(iter(reqs)), refe))
print(f"== encoder, 150 padded batches (ids, mask); imap max abs err vs naive {err:.2e}", flush=True)
rounds({"alone": alone_e, "records run_batches": lambda: pe.run_batches(reqs),
        "imap, gathered by the run (new)": lambda: list(pe.imap(iter(reqs))),
        "imap, filled by the reader (old)": lambda: list(pe.imap(records.pack(r) for r in reqs))})

net = torchvision.models.resnet18().eval().half().cuda().to(memory_format=torch.channels_last)
@torch.inference_mode()
def loss(b):
    x, y = b
    logits = net(x.permute(0, 3, 1, 2).half().div_(255).contiguous(memory_format=torch.channels_last))
    return torch.nn.functional.cross_entropy(logits.float(), y, reduction="none")
imgs = torch.randint(0, 256, (3072, 160, 160, 3), dtype=torch.uint8); labels = torch.randint(0, 1000, (3072,))
pairs = [(imgs[i:i + 128].clone(), labels[i:i + 128].clone()) for i in range(0, 3072, 128)]
dev = [(x.cuda(), y.cuda()) for x, y in pairs]
def alone():
    with torch.cuda.stream(ts):
        for b in dev: loss(b)
    ts.synchronize()
p = fp.StreamPipeline(loss)
print("== resnet18 fp16 loss, 24 pageable batches of 128 160x160 images + labels, imap over the list", flush=True)
rounds({"alone": alone, "naive": lambda: [loss((x.cuda(), y.cuda())).cpu() for x, y in pairs],
        "imap, gathered by the run (new)": lambda: list(p.imap(iter(pairs))),
        "imap, filled by the reader (old)": lambda: list(p.imap(records.pack(b) for b in pairs))}, 9)
print("  stats:", p.stats.staging, p.imap_stats, flush=True)
