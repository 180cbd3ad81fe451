"""Session 31, small fields: padded requests (ids, mask) through a 2-layer encoder (bf16
d512, host-bound), A/B in one process: records gathered by the bulk copy (new) against
records packed on the calling thread first (the session-30 way: pack_all(fill=True)), ids
only (one array), each with small copies keeping the GIL (pageable.SMALL_COPY_BYTES = 64 KiB,
new) or letting it go (0, the old ctypes.memmove). Then resnet18 images+labels records
against one array, 11 rounds. Alternating rounds, medians."""
import time, statistics
import numpy as np, torch, torchvision
import fullpipe as fp
from fullpipe.pipeline import pageable, records

def rounds(V, n=11, base="alone"):
    res = {k: [] for k in V}; items = list(V.items())
    for fn in V.values(): fn()
    for r in range(n):
        for k, fn in items[r % len(items):] + items[:r % len(items)]:
            torch.cuda.synchronize(); t0 = time.perf_counter(); fn(); res[k].append((time.perf_counter() - t0) * 1e3)
    a = statistics.median(res[base])
    for k, v in res.items():
        m = statistics.median(v); print(f"  {k:34s} {m:8.1f} ms  {a / m:5.2f}x {base}   {[round(x) for x in v]}", flush=True)

def gil(small):
    def wrap(fn):
        def run():
            pageable.SMALL_COPY_BYTES = small
            try:
                return fn()
            finally:
                pageable.SMALL_COPY_BYTES = 64 << 10
        return run
    return wrap

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
@torch.inference_mode()
def f_ids(ids):
    return f_pair((ids, ids == PAD))
rng = np.random.default_rng(0); g = torch.Generator().manual_seed(0)
reqs = []
for _ in range(150):
    b, seq = int(rng.integers(4, 64)), int(rng.choice([32, 64, 128, 256]))
    lengths = torch.from_numpy(rng.integers(1, seq + 1, b))
    pad = torch.arange(seq)[None, :] >= lengths[:, None]
    reqs.append((torch.randint(1, VOCAB, (b, seq), generator=g).masked_fill(pad, PAD), pad))
ids_only = [r[0] for r in reqs]
devr = [(i.cuda(), q.cuda()) for i, q in reqs]
def alone_e():
    with torch.cuda.stream(ts):
        for b in devr: f_pair(b)
    ts.synchronize()
pp, pi = fp.StreamPipeline(f_pair), fp.StreamPipeline(f_ids)
refe = [f_pair((i.cuda(), q.cuda())).cpu() for i, q in reqs]
err = max(float((a - b).abs().max()) for a, b in zip(pp.run_batches(reqs), refe))
err2 = max(float((a - b).abs().max()) for a, b in zip(pp.run_batches(records.pack_all(reqs, fill=True)), refe))
print(f"== encoder, 150 padded batches (ids, mask); max abs err vs naive {err:.2e} / packed first {err2:.2e}", flush=True)
rounds({"alone": alone_e,
        "records gathered": lambda: pp.run_batches(reqs),
        "records gathered, GIL let go": gil(0)(lambda: pp.run_batches(reqs)),
        "records packed first": lambda: pp.run_batches(records.pack_all(reqs, fill=True)),
        "records packed first, GIL let go": gil(0)(lambda: pp.run_batches(records.pack_all(reqs, fill=True))),
        "ids only": lambda: pi.run_batches(ids_only),
        "ids only, GIL let go": gil(0)(lambda: pi.run_batches(ids_only))})
print("  records stats:", pp.stats.staging, pp.stats.host_copies, flush=True)

net = torchvision.models.resnet18().eval().half().cuda().to(memory_format=torch.channels_last)
@torch.inference_mode()
def loss(b):
    x, y = b
    logits = net(x.permute(0, 3, 1, 2).half().div_(255).contiguous(memory_format=torch.channels_last))
    return torch.nn.functional.cross_entropy(logits.float(), y, reduction="none")
@torch.inference_mode()
def logits_only(x):
    return net(x.permute(0, 3, 1, 2).half().div_(255).contiguous(memory_format=torch.channels_last)).float()
imgs = torch.randint(0, 256, (3072, 160, 160, 3), dtype=torch.uint8); labels = torch.randint(0, 1000, (3072,))
pairs = [(imgs[i:i + 128].clone(), labels[i:i + 128].clone()) for i in range(0, 3072, 128)]
dev = [(x.cuda(), y.cuda()) for x, y in pairs]
def alone():
    with torch.cuda.stream(ts):
        for b in dev: loss(b)
    ts.synchronize()
p, p1 = fp.StreamPipeline(loss), fp.StreamPipeline(logits_only)
print("== resnet18 fp16 over 24 batches of 128 pageable 160x160 images + labels", flush=True)
rounds({"alone": alone, "naive": lambda: [loss((x.cuda(), y.cuda())).cpu() for x, y in pairs],
        "records run_batches": lambda: p.run_batches(pairs),
        "records packed first": lambda: p.run_batches(records.pack_all(pairs, fill=True)),
        "one array run_batches": lambda: p1.run_batches([x for x, _ in pairs])})
