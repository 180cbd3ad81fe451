"""Session 31: records whose fields are pinned go to the GPU where they are (one H2D per
field), and a repeated list's fields are pinned in place by the pin cache. resnet18 fp16
loss over [images, labels] (pageable, repeated list; pinned with pin_memory()) against the
one-array pipeline of the same loss, the naive loop and compute alone; DataLoaders
(num_workers=0; 4 with pin_memory=True): imap(loader), imap(loader, read_ahead=False), a
hand-written reader thread feeding the naive loop, against the naive loop over the same
loader; small fields (encoder) against ids only and packed first. Alternating rounds, medians."""
import time, statistics, threading, queue
import numpy as np, torch, torchvision
import fullpipe as fp
from fullpipe.pipeline import records
from torch.utils.data import DataLoader, TensorDataset

def rounds(V, n=9, base="alone"):
    res = {k: [] for k in V}; items = list(V.items())
    for fn in V.values(): fn()
    for r in range(n):
        for k, fn in items[r % len(items):] + items[:r % len(items)]:
            torch.cuda.synchronize(); t0 = time.perf_counter(); fn(); res[k].append((time.perf_counter() - t0) * 1e3)
    a = statistics.median(res[base])
    for k, v in res.items():
        m = statistics.median(v); print(f"  {k:36s} {m:8.1f} ms  {a / m:5.2f}x {base}   {[round(x) for x in v]}", flush=True)

ts = torch.cuda.Stream()
net = torchvision.models.resnet18().eval().half().cuda().to(memory_format=torch.channels_last)
@torch.inference_mode()
def loss(b):
    x, y = b
    logits = net(x.permute(0, 3, 1, 2).half().div_(255).contiguous(memory_format=torch.channels_last))
    return torch.nn.functional.cross_entropy(logits.float(), y, reduction="none")
imgs = torch.randint(0, 256, (3072, 160, 160, 3), dtype=torch.uint8); labels = torch.randint(0, 1000, (3072,))
pairs = [(imgs[i:i + 128].clone(), labels[i:i + 128].clone()) for i in range(0, 3072, 128)]
pinned = [(x.pin_memory(), y.pin_memory()) for x, y in pairs]
lab_dev = [y.cuda() for _, y in pairs]
order = {}
@torch.inference_mode()
def loss_one(x):
    k = order["k"]; order["k"] += 1
    return loss((x, lab_dev[k % len(lab_dev)]))
def one_array(src):
    order["k"] = 0
    return p1.run_batches([x for x, _ in src])
dev = [(x.cuda(), y.cuda()) for x, y in pairs]
def alone():
    with torch.cuda.stream(ts):
        for b in dev: loss(b)
    ts.synchronize()
p, p1, pp = fp.StreamPipeline(loss), fp.StreamPipeline(loss_one), fp.StreamPipeline(loss)
ref = torch.cat([loss((x.cuda(), y.cuda())).cpu() for x, y in pairs])
print("max err records", float((torch.cat(p.run_batches(pairs)) - ref).abs().max()),
      "pinned records", float((torch.cat(pp.run_batches(pinned)) - ref).abs().max()),
      "one array", float((torch.cat(one_array(pairs)) - ref).abs().max()), flush=True)
print("== resnet18 fp16 loss over 24 batches of 128 160x160 images + labels", flush=True)
rounds({"alone": alone, "naive": lambda: [loss((x.cuda(), y.cuda())).cpu() for x, y in pairs],
        "records run_batches (pageable list)": lambda: p.run_batches(pairs),
        "one array run_batches (pageable)": lambda: one_array(pairs),
        "records run_batches (pinned)": lambda: pp.run_batches(pinned),
        "one array run_batches (pinned)": lambda: one_array(pinned)})
print("  records pageable:", p.stats.staging, p.stats.pinned.get("in_place"), flush=True)
print("  records pinned:", pp.stats.staging, "one array:", p1.stats.staging, flush=True)

ds = TensorDataset(imgs, labels)
for workers, pin in ((0, False), (4, True)):
    loader = DataLoader(ds, batch_size=128, num_workers=workers, pin_memory=pin, persistent_workers=workers > 0)
    def naive_loader():
        return [loss((x.cuda(non_blocking=pin), y.cuda(non_blocking=pin))).cpu() for x, y in loader]
    def threaded_naive():  # a reader thread puts the loader's batches in a queue; the naive loop takes them
        q = queue.Queue(4)
        def read():
            for b in loader: q.put(b)
            q.put(None)
        t = threading.Thread(target=read); t.start(); out = []
        while (b := q.get()) is not None:
            x, y = b; out.append(loss((x.cuda(non_blocking=pin), y.cuda(non_blocking=pin))).cpu())
        t.join(); return out
    pl = fp.StreamPipeline(loss)
    got = torch.cat(list(pl.imap(loader)))
    print(f"== DataLoader num_workers={workers} pin_memory={pin}: imap max err {float((got - ref).abs().max())}", flush=True)
    rounds({"naive over the loader": naive_loader, "imap(loader)": lambda: list(pl.imap(loader)),
            "imap(loader, read_ahead=False)": lambda: list(pl.imap(loader, read_ahead=False)),
            "reader thread + naive loop": threaded_naive,
            "iterating the loader alone": lambda: [None for _ in loader]}, 7, base="naive over the loader")
    print("  imap stats:", pl.stats.staging, pl.imap_stats, flush=True)

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
pe, pi = fp.StreamPipeline(f_pair), fp.StreamPipeline(f_ids)
refe = [f_pair((i.cuda(), q.cuda())).cpu() for i, q in reqs]
err = max(float((a - b).abs().max()) for a, b in zip(pe.run_batches(reqs), refe))
print(f"== encoder, 150 padded batches (ids, mask); max abs err vs naive {err:.2e}", flush=True)
rounds({"alone": alone_e, "records gathered": lambda: pe.run_batches(reqs),
        "records packed first": lambda: pe.run_batches(records.pack_all(reqs, fill=True)),
        "records imap": lambda: list(pe.imap(iter(reqs))),
        "ids only": lambda: pi.run_batches(ids_only)})
print("  records stats:", pe.stats.staging, flush=True)
