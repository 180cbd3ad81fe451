"""Session 31: batches of several arrays gathered by the staging copy (no pack in front of
it), a new user's side with the defaults, on the workloads session 30's p203 found slow:
resnet18 fp16 over [images, labels] (run_batches, imap, and run() of the whole tuple) against
compute alone, the naive loop and the one-array pipeline; a dict of two 256 MiB float32
arrays through run() against the naive loop; padded requests (ids, mask) through a 2-layer
encoder against the ids-only pipeline (small fields: no regression). Alternating rounds, medians."""
import time, statistics
import numpy as np, torch, torchvision
import fullpipe as fp
from torch.utils.data import DataLoader, TensorDataset

def rounds(V, n=7, base="alone"):
    res = {k: [] for k in V}; items = list(V.items())
    for fn in V.values(): fn()
    for r in range(n):
        for k, fn in items[r % len(items):] + items[:r % len(items)]:
            torch.cuda.synchronize(); t0 = time.perf_counter(); fn(); res[k].append((time.perf_counter() - t0) * 1e3)
    a = statistics.median(res[base])
    for k, v in res.items():
        m = statistics.median(v); print(f"  {k:30s} {m:8.1f} ms  {a / m:5.2f}x {base}   {[round(x) for x in v]}", flush=True)

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
loader = DataLoader(TensorDataset(imgs, labels), batch_size=128)
pairs = list(loader)
dev = [(x.cuda(), y.cuda()) for x, y in pairs]
ts = torch.cuda.Stream()
def alone():
    with torch.cuda.stream(ts):
        for b in dev: loss(b)
    ts.synchronize()
def naive():
    for x, y in pairs: loss((x.cuda(), y.cuda())).cpu()
p = fp.StreamPipeline(loss); p1 = fp.StreamPipeline(logits_only); pr = fp.StreamPipeline(loss); pr1 = fp.StreamPipeline(logits_only)
ref = torch.cat([loss((x.cuda(), y.cuda())).cpu() for x, y in pairs])
got = torch.cat(p.run_batches(pairs)); got2 = torch.cat(list(p.imap(loader))); got3 = pr.run((imgs, labels))
print("resnet18 loss: max err run_batches", float((got - ref).abs().max()), "imap", float((got2 - ref).abs().max()),
      "run(tuple)", float((got3 - ref).abs().max()), flush=True)
print("== resnet18 fp16 over 24 batches of 128 pageable 160x160 images + labels")
rounds({"alone": alone, "naive": naive, "records run_batches": lambda: p.run_batches(pairs),
        "one array run_batches": lambda: p1.run_batches([x for x, _ in pairs]),
        "records imap(loader)": lambda: list(p.imap(loader)),
        "records run((imgs, labels))": lambda: pr.run((imgs, labels)),
        "one array run(imgs)": lambda: pr1.run(imgs)})
print("  records run_batches stats:", p.stats.staging, p.stats.host_copies)
print("  records run() stats:", pr.stats.staging, pr.stats.chunk)

n = 1 << 22
X = {"x": torch.randn(n, 16), "w": torch.randn(n, 16)}
@torch.inference_mode()
def dot(b): return (b["x"] * b["w"]).sum(1, keepdim=True)
want = (X["x"] * X["w"]).sum(1, keepdim=True)
pd = fp.StreamPipeline(dot)
y = pd.run(X); y = pd.run(X)
print("dict run: max err", float((y - want).abs().max()), "chunk", pd.stats.chunk.get("rows"), flush=True)
Xd = {k: v.cuda() for k, v in X.items()}
def alone_d():
    with torch.cuda.stream(ts): dot(Xd)
    ts.synchronize()
print("== dict of two 256 MiB float32 arrays, (x*w).sum(1), run()")
rounds({"alone": alone_d, "naive": lambda: dot({k: v.cuda() for k, v in X.items()}).cpu(), "records run": lambda: pd.run(X)}, 5, base="naive")
print("  stats:", pd.stats.staging, pd.stats.chunk)

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
print(f"== encoder, 150 padded batches (ids, mask); max abs err vs naive {err:.2e}", flush=True)
rounds({"alone": alone_e, "naive": lambda: [f_pair((i.cuda(), q.cuda())).cpu() for i, q in reqs],
        "records run_batches": lambda: pp.run_batches(reqs), "ids only run_batches": lambda: pi.run_batches(ids_only),
        "records imap": lambda: list(pp.imap(iter(reqs)))}, 9)
print("  records stats:", pp.stats.staging, pp.stats.host_copies)
