"""Session 32: why is a host-bound model's call slower inside fullpipe? Hypotheses tested
on the bench's encoder (127 variable batches, same process, alternating rounds):
  1. rotating PyTorch's current stream over 3 streams costs host time per call (cuBLAS
     handles, per-stream allocator pools): A1 (one stream) against A3 (3 in turn);
  2. Python work between calls slows the next call (caches): Apy (40 us of Python between);
  3. a host held to 3 batches ahead of the GPU loses the run-ahead that smooths batches
     of different GPU time: Ad3;
  G3: copies + events on 3 streams; G1c: one compute stream, copies on two others;
  H the bench's hand-written pipeline; fullpipe variants (defaults; copy_streams with one
  compute stream). Then: a micro-benchmark of stream switching; cProfile of fullpipe."""
import cProfile, io, pstats, random, statistics, sys, time
import torch
import fullpipe as fp
from fullpipe.experiments.workloads import _HandPipeline

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
ys_pageable = [torch.empty(t.shape[0], D) for t in bx]
s1 = torch.cuda.Stream(); s3 = [torch.cuda.Stream() for _ in range(3)]
s_in, s_out = torch.cuda.Stream(), torch.cuda.Stream()
default = torch.cuda.default_stream()


def busy_python(n=400):
    d = {}
    for i in range(n):
        d[i & 31] = d.get(i & 31, 0) + i
    return d


def alone(streams, py=False, ahead=0):
    evs = []
    for i, t in enumerate(bdev):
        s = streams[i % len(streams)]
        torch.cuda.set_stream(s)
        if ahead and i >= ahead:
            evs[i - ahead].synchronize()
        enc(t)
        if ahead:
            e = torch.cuda.Event(); e.record(s); evs.append(e)
        if py:
            busy_python()
    torch.cuda.set_stream(default)
    for s in streams:
        s.synchronize()


def copies(streams):
    ev = [torch.cuda.Event() for _ in streams]
    for i, t in enumerate(bdev):
        s = streams[i % len(streams)]
        torch.cuda.set_stream(s)
        x = torch.empty_like(t); x.copy_(bpin[i], non_blocking=True)
        y = enc(x)
        outs[i].copy_(y, non_blocking=True)
        ev[i % len(streams)].record(s)
    torch.cuda.set_stream(default)
    for s in streams:
        s.synchronize()


def copies_one_compute_stream():
    """H2D on s_in, compute on s1, D2H on s_out, events joining them."""
    for i, t in enumerate(bdev):
        torch.cuda.set_stream(s_in)
        x = torch.empty_like(t); x.copy_(bpin[i], non_blocking=True)
        e1 = torch.cuda.Event(); e1.record(s_in)
        torch.cuda.set_stream(s1)
        s1.wait_event(e1)
        y = enc(x)
        x.record_stream(s1)
        e2 = torch.cuda.Event(); e2.record(s1)
        s_out.wait_event(e2)
        torch.cuda.set_stream(s_out)
        outs[i].copy_(y, non_blocking=True)
        y.record_stream(s_out)
    torch.cuda.set_stream(default)
    for s in (s_in, s1, s_out):
        s.synchronize()


hand = _HandPipeline(torch, torch.device("cuda"), enc, bx, ys_pageable)
pipes = {"F fullpipe": (fp.StreamPipeline(enc), bx),
         "P fullpipe pinned": (fp.StreamPipeline(enc), bpin),
         "Fc1 fp copy_streams 1": (fp.StreamPipeline(enc, streams=1, copy_streams=True), bx),
         "Pc1 fp pinned copy_streams 1": (fp.StreamPipeline(enc, streams=1, copy_streams=True), bpin),
         "Pc3 fp pinned copy_streams 3": (fp.StreamPipeline(enc, streams=3, copy_streams=True), bpin),
         "Pnt fp pinned timing=False": (fp.StreamPipeline(enc, timing=False), bpin)}
V = {"A1 alone": lambda: alone([s1]), "A3 alone 3 streams": lambda: alone(s3),
     "Apy alone + 40us python": lambda: alone([s1], py=True), "Ad3 alone <=3 ahead": lambda: alone([s1], ahead=3),
     "G3 copies 3 streams": lambda: copies(s3), "G1c copies 1 compute stream": copies_one_compute_stream,
     "H hand pipeline": lambda: hand(bx, ys_pageable)}
for k, (p, xs) in pipes.items():
    V[k] = (lambda p=p, xs=xs: p.run_batches(xs))
t0 = time.perf_counter(); busy_python(); print(f"busy_python: {(time.perf_counter() - t0) * 1e6:.1f} us")
for fn in V.values():
    fn(); fn()
res = {k: [] for k in V}; items = list(V.items())
for r in range(10):
    for k, fn in items[r % len(items):] + items[:r % len(items)]:
        torch.cuda.synchronize(); CALLS.clear()
        t0 = time.perf_counter(); fn(); ms = (time.perf_counter() - t0) * 1e3
        res[k].append((ms, statistics.median(CALLS) * 1e6))
a = statistics.median(m for m, _ in res["A1 alone"])
for k, v in res.items():
    m = statistics.median(x for x, _ in v); c = statistics.median(x for _, x in v)
    print(f"  {k:30s} wall {m:6.1f} ms ({a / m:4.2f}x alone)  call {c:6.1f} us   walls {[round(x) for x, _ in v]}")
for k, (p, _) in pipes.items():
    st = p.stats
    print(f"--- {k}: {st.host_us if hasattr(st, 'host_us') else ''}")
print(pipes["P fullpipe pinned"][0].stats)
print(pipes["Pc1 fp pinned copy_streams 1"][0].stats)

# stream switching, micro: a small bf16 Linear on one stream vs 3 in turn
lin = torch.nn.Linear(512, 512, device="cuda", dtype=torch.bfloat16)
xx = torch.randn(64, 512, device="cuda", dtype=torch.bfloat16)
with torch.inference_mode():
    for label, sts in (("one stream", [s1]), ("3 streams", s3), ("one stream", [s1]), ("3 streams", s3)):
        for _ in range(50):
            lin(xx)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(3000):
            torch.cuda.set_stream(sts[i % len(sts)])
            lin(xx)
        el = (time.perf_counter() - t0) / 3000 * 1e6
        torch.cuda.set_stream(default); torch.cuda.synchronize()
        print(f"micro Linear 64x512 bf16 + set_stream, {label}: {el:.2f} us/call")

# where fullpipe's own host time goes: cProfile of 3 pinned runs, fullpipe's functions
p = pipes["P fullpipe pinned"][0]
prof = cProfile.Profile(); prof.enable()
for _ in range(3):
    p.run_batches(bpin)
prof.disable()
s = io.StringIO(); ps = pstats.Stats(prof, stream=s).sort_stats("tottime"); ps.print_stats(45)
print(s.getvalue()[:9000])
s = io.StringIO(); ps = pstats.Stats(prof, stream=s).sort_stats("cumulative"); ps.print_stats("fullpipe", 40)
print(s.getvalue()[:9000])
for p, _ in pipes.values():
    p.close()
