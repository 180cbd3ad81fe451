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


import gc
acc = {"first": 0.0, "second": 0.0, "n": 0}
def enc2(x):
    t0 = time.perf_counter(); enc(x); t1 = time.perf_counter(); y = enc(x); t2 = time.perf_counter()
    acc["first"] += t1 - t0; acc["second"] += t2 - t1; acc["n"] += 1
    return y
def alone2():
    with torch.cuda.stream(cs):
        for t in bdev: enc2(t)
    cs.synchronize()
pd2 = fp.StreamPipeline(enc2)
pd = fp.StreamPipeline(enc)
def nogc(fn):
    gc.disable()
    try: return fn()
    finally: gc.enable()
V = {"A alone": lambda: alone(bdev, [cs]), "A2 alone, f twice": alone2, "D2 fullpipe, f twice": lambda: pd2.run_batches(bx),
     "D fullpipe": lambda: pd.run_batches(bx), "Dg fullpipe, gc off": lambda: nogc(lambda: pd.run_batches(bx))}
for fn in V.values(): fn(); fn()
res = {k: [] for k in V}
items = list(V.items())
for r in range(10):
    for k, fn in items[r % len(items):] + items[:r % len(items)]:
        torch.cuda.synchronize()
        acc.update(first=0.0, second=0.0, n=0)
        t0 = time.perf_counter(); got = fn(); ms = (time.perf_counter() - t0) * 1e3
        if acc["n"]:
            extra = (acc["first"] / acc["n"] * 1e6, acc["second"] / acc["n"] * 1e6)
        elif k.startswith("A"):
            extra = (got, None)
        else:
            extra = (pd.stats.host_us.get("compute_call"), None)
        res[k].append((ms, extra))
for k, v in res.items():
    fst = statistics.median(e[0] for _, e in v)
    snd = [e[1] for _, e in v if e[1] is not None]
    print(f"  {k:24s} wall {statistics.median(a for a, _ in v):6.1f} ms  call/first {fst:6.0f} us"
          + (f"  second {statistics.median(snd):6.0f} us" if snd else "")
          + f"   firsts {[round(e[0]) for _, e in v]}" + (f" seconds {[round(e[1]) for _, e in v]}" if snd else ""))
