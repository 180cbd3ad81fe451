"""Session 30: what slows a host-bound model's call inside fullpipe? The bench's encoder
(variable-length batches) called in a bare loop on device-resident inputs, with fullpipe's
per-batch driver work added piece by piece around the call (same process, alternating
rounds): A alone; B + an H2D of the batch's ids from pinned memory before each call;
C + a D2H of y into pinned memory after; D both; E D + an event recorded per batch;
G D on 3 streams in turn; F fullpipe (defaults, pageable lists); P fullpipe, pinned inputs.
Per variant: the wall time and the median host time of the call itself (timed around f)."""
import time, statistics, random
import torch
import fullpipe as fp

VOCAB, D, H, FF = 32000, 1024, 16, 4096
with torch.device("cuda"):
    emb = torch.nn.Embedding(VOCAB, D, dtype=torch.bfloat16).eval()
    layer = torch.nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, activation="gelu", batch_first=True,
                                             dtype=torch.bfloat16).eval()
CALLS = []
def enc(ids):
    t0 = time.perf_counter()
    with torch.inference_mode():
        y = layer(emb(ids)).float().mean(dim=1)
    CALLS.append(time.perf_counter() - t0)
    return y
rnd = random.Random(14); g = torch.Generator().manual_seed(0); bx = []; tok = 0
while tok < 1 << 20:
    seq = rnd.choice((64, 128, 256, 512)); b = max(1, rnd.randint(2048, 16384) // seq)
    bx.append(torch.randint(0, VOCAB, (b, seq), dtype=torch.int32, generator=g)); tok += b * seq
bpin = [t.pin_memory() for t in bx]
bdev = [t.cuda() for t in bx]
outs = [torch.empty(t.shape[0], D).pin_memory() for t in bx]
s1 = torch.cuda.Stream(); s3 = [torch.cuda.Stream() for _ in range(3)]
def loop(h2d, d2h, event, streams):
    ev = [torch.cuda.Event() for _ in streams]
    for i, t in enumerate(bdev):
        s = streams[i % len(streams)]
        torch.cuda.set_stream(s)
        x = t
        if h2d:
            x = torch.empty_like(t); x.copy_(bpin[i], non_blocking=True)
        y = enc(x)
        if d2h:
            outs[i].copy_(y, non_blocking=True)
        if event:
            ev[i % len(streams)].record(s)
    torch.cuda.set_stream(torch.cuda.default_stream())
    for s in streams: s.synchronize()
pf = fp.StreamPipeline(enc)
V = {"A alone": lambda: loop(0, 0, 0, [s1]), "B +h2d": lambda: loop(1, 0, 0, [s1]), "C +d2h": lambda: loop(0, 1, 0, [s1]),
     "D +h2d+d2h": lambda: loop(1, 1, 0, [s1]), "E D+event": lambda: loop(1, 1, 1, [s1]),
     "G D on 3 streams": lambda: loop(1, 1, 1, s3), "F fullpipe": lambda: pf.run_batches(bx),
     "P fullpipe pinned": lambda: pf.run_batches(bpin)}
for fn in V.values(): fn(); fn()
res = {k: [] for k in V}; items = list(V.items())
for r in range(12):
    for k, fn in items[r % len(items):] + items[:r % len(items)]:
        torch.cuda.synchronize(); CALLS.clear()
        t0 = time.perf_counter(); fn(); ms = (time.perf_counter() - t0) * 1e3
        res[k].append((ms, statistics.median(CALLS) * 1e6))
a = statistics.median(m for m, _ in res["A alone"])
for k, v in res.items():
    m = statistics.median(x for x, _ in v); c = statistics.median(x for _, x in v)
    print(f"  {k:20s} wall {m:6.1f} ms ({a / m:4.2f}x alone)  call {c:6.1f} us   walls {[round(x) for x, _ in v]}")
print(pf.stats)
