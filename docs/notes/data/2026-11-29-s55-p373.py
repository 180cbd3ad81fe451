"""p373: u5's model on the dict batches: is its call slower on fullpipe's unpacked records (views of one uint8 block)
than on separate tensors, or on a side stream than on the default one? Host time of 60 calls, then a sync."""
import random, statistics, time
import numpy as np
import torch
from fullpipe.pipeline.records import pack
from fullpipe.pipeline.tensors import TorchFramework

dev = torch.device("cuda")
torch.manual_seed(0)
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
fw = TorchFramework(0)
sep = [{k: v.to(dev) for k, v in b.items()} for b in batches]
packed = [pack(b) for b in batches]
recs = [torch.from_numpy(np.ascontiguousarray(p.host)).view(torch.uint8).reshape(p.host.shape[0], -1).to(dev) for p in packed]
views = [p.layout.unpack(fw, r) for p, r in zip(packed, recs)]
side = torch.cuda.Stream()


def run(xs, stream):
    torch.cuda.synchronize()
    t = time.perf_counter()
    with torch.cuda.stream(stream):
        for x in xs:
            f(x)
    host = (time.perf_counter() - t) * 1e6 / len(xs)
    torch.cuda.synchronize()
    return host, (time.perf_counter() - t) * 1e6 / len(xs)


ways = {"separate, default stream": (sep, torch.cuda.default_stream()), "separate, side stream": (sep, side),
        "views, default stream": (views, torch.cuda.default_stream()), "views, side stream": (views, side)}
for xs, s in ways.values():
    run(xs, s)
res = {k: [] for k in ways}
for _ in range(7):
    for k, (xs, s) in ways.items():
        res[k].append(run(xs, s))
for k, v in res.items():
    print(f"RESULT {k:26s} call {statistics.median(h for h, _ in v):.0f} us, with the sync {statistics.median(w for _, w in v):.0f} us a batch", flush=True)
