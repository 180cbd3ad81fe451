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


class OneAtATime(fp.StreamPipeline):
    def _call_group(self, mode, tc, ring_in):
        return 1
def small(x): return x * 2
rng = np.random.default_rng(0)
xs_small = [rng.random((64 + (i % 7), 256), dtype=np.float32) for i in range(400)]
pg, p1 = fp.StreamPipeline(enc), OneAtATime(enc)
sg, s1 = fp.StreamPipeline(small), OneAtATime(small)
ref = [y.clone() for y in p1.run_batches(bx)]
got = pg.run_batches(bx)
print("encoder outputs equal:", all(torch.equal(a, b) for a, b in zip(ref, got)), "call_group", pg.stats.call_group, p1.stats.call_group)
ys = sg.run_batches(xs_small); assert all(np.array_equal(a, b * 2) for a, b in zip(ys, xs_small))
def fpr(p, xs):
    p.run_batches(xs); return p.stats.host_us.get("compute_call"), p.stats.enqueue_us_per_batch
V = {"alone": lambda: (alone(bdev, [cs]), None), "fullpipe (calls grouped)": lambda: fpr(pg, bx),
     "fullpipe one at a time": lambda: fpr(p1, bx),
     "x*2 grouped": lambda: fpr(sg, xs_small), "x*2 one at a time": lambda: fpr(s1, xs_small)}
for fn in V.values(): fn(); fn()
res = {k: [] for k in V}
items = list(V.items())
for r in range(14):
    for k, fn in items[r % len(items):] + items[:r % len(items)]:
        torch.cuda.synchronize()
        t0 = time.perf_counter(); c, e = fn(); ms = (time.perf_counter() - t0) * 1e3
        res[k].append((ms, c, e))
for k, v in res.items():
    print(f"  {k:26s} wall {statistics.median(a for a, _, _ in v):6.1f} ms  call {statistics.median(c for _, c, _ in v):6.1f} us"
          + (f"  enqueue {statistics.median(e for _, _, e in v):6.1f} us/batch" if v[0][2] is not None else "")
          + f"   walls {[round(a) for a, _, _ in v]}")
print(pg.stats)
