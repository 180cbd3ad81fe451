"""Session 29: why the encoder's call is slower inside fullpipe than alone (p190 sec. 4:
+120..490 us per call in every round pair). Variants in alternating rounds, same process:
A alone, one stream; B alone, calls rotating over 3 streams; C alone, inputs as as_strided
views of one block (as fullpipe hands them); G alone with a thread doing ctypes.memmove
(GIL); D fullpipe defaults (pageable); E fullpipe, pinned inputs; F fullpipe streams=1.
Then CUPTI: kernel time and busy share for A and D."""
import time, statistics, random, threading, ctypes
import numpy as np, torch
import fullpipe as fp

VOCAB, D, H, FF = 32000, 1024, 16, 4096
with torch.device("cuda"):
    emb = torch.nn.Embedding(VOCAB, D, dtype=torch.bfloat16).eval()
    layer = torch.nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, activation="gelu", batch_first=True,
                                             dtype=torch.bfloat16).eval()
def enc(ids):
    with torch.inference_mode():
        return layer(emb(ids)).float().mean(dim=1)
rnd = random.Random(14); g = torch.Generator().manual_seed(0); bx = []; tok = 0
while tok < 1 << 20:
    seq = rnd.choice((64, 128, 256, 512)); b = max(1, rnd.randint(2048, 16384) // seq)
    bx.append(torch.randint(0, VOCAB, (b, seq), dtype=torch.int32, generator=g)); tok += b * seq
bpin = [t.pin_memory() for t in bx]
bdev = [t.cuda() for t in bx]
block = torch.cat([t.flatten() for t in bdev]); views = []; off = 0
for t in bdev:
    views.append(block.as_strided(tuple(t.shape), (t.shape[1], 1), off)); off += t.numel()
cs = torch.cuda.Stream(); three = [torch.cuda.Stream() for _ in range(3)]

def alone(inputs, streams):
    calls = 0.0
    prev = torch.cuda.current_stream()
    for i, t in enumerate(inputs):
        torch.cuda.set_stream(streams[i % len(streams)])
        t0 = time.perf_counter(); enc(t); calls += time.perf_counter() - t0
    torch.cuda.set_stream(prev)
    for s in streams: s.synchronize()
    return calls / len(inputs) * 1e6

stop = threading.Event()
def gil_thread():
    a = np.zeros(1 << 18, np.uint8); b = np.zeros(1 << 18, np.uint8)
    while not stop.is_set():
        for _ in range(8):
            ctypes.memmove(a.ctypes.data, b.ctypes.data, a.nbytes)
        time.sleep(0)
def with_gil_thread():
    stop.clear(); th = threading.Thread(target=gil_thread, daemon=True); th.start()
    try:
        return alone(bdev, [cs])
    finally:
        stop.set(); th.join()


def busy_us(target_us):
    d = {i: i for i in range(64)}; t_end = time.perf_counter() + target_us * 1e-6; n = 0
    while time.perf_counter() < t_end:
        for i in range(16): n += d[i]
    return n
def alone_busy(inputs):
    calls = 0.0
    with torch.cuda.stream(cs):
        for t in inputs:
            t0 = time.perf_counter(); enc(t); calls += time.perf_counter() - t0
            busy_us(60)
    cs.synchronize(); return calls / len(inputs) * 1e6
outs_pin = [torch.empty(t.shape[0], D).pin_memory() for t in bx]
pd = fp.StreamPipeline(enc); pe = fp.StreamPipeline(enc); p1 = fp.StreamPipeline(enc, copy_threads=1)
def fpr(p, xs, outs=None):
    p.run_batches(xs, outs); return p.stats.host_us.get("compute_call")
V = {"A alone": lambda: alone(bdev, [cs]), "A2 alone + 60us python between": lambda: alone_busy(bdev),
     "D fullpipe": lambda: fpr(pd, bx), "E2 fullpipe pinned in+out": lambda: fpr(pe, bpin, outs_pin),
     "D1 fullpipe copy_threads=1": lambda: fpr(p1, bx)}
for fn in V.values(): fn(); fn()
print("threads:", [t.name for t in threading.enumerate()])
res = {k: [] for k in V}
items = list(V.items())
for r in range(10):
    for k, fn in items[r % len(items):] + items[:r % len(items)]:
        torch.cuda.synchronize()
        t0 = time.perf_counter(); call = fn(); ms = (time.perf_counter() - t0) * 1e3
        res[k].append((ms, call))
print(f"{len(bx)} batches, {tok} tokens")
for k, v in res.items():
    print(f"  {k:32s} wall ms median {statistics.median(a for a, _ in v):6.1f}  call us median {statistics.median(c for _, c in v):6.0f}"
          f"   walls {[round(a) for a, _ in v]}  calls {[round(c) for _, c in v]}")
for n, p in (("D", pd), ("E2", pe), ("D1", p1)):
    print(n, "host_us:", {k: round(x, 1) for k, x in p.stats.host_us.items()}, "staging", p.stats.staging, "enqueue", round(p.stats.enqueue_us_per_batch, 1))
