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


from fullpipe.cuda.streams import create_stream
from fullpipe.cuda.interop import torch_stream, as_torch
from fullpipe.cuda.memory import DeviceArray
d = fp.Device(0)
fs_core = create_stream(d); ext = torch_stream(fs_core, device=0)
pool = fp.DevicePool(d)
nb = block.numel() * 4
ptr = pool.allocate_ptr(nb, 0)
fpmem = torch.as_tensor(DeviceArray(ptr, (block.numel(),), np.int32, device_index=0), device="cuda:0")
fpmem.copy_(block); torch.cuda.synchronize()
fviews = []; off = 0
for t in bdev:
    fviews.append(fpmem.as_strided(tuple(t.shape), (t.shape[1], 1), off)); off += t.numel()
inner = [0.0, 0]
def enc_t(x):
    t0 = time.perf_counter(); y = enc(x); inner[0] += time.perf_counter() - t0; inner[1] += 1; return y
pd = fp.StreamPipeline(enc_t)
def fpr():
    inner[0] = 0.0; inner[1] = 0
    pd.run_batches(bx); return pd.stats.host_us.get("compute_call"), inner[0] / inner[1] * 1e6
V = {"A alone": lambda: (alone(bdev, [cs]), None), "X alone, fullpipe stream": lambda: (alone(bdev, [ext]), None),
     "M alone, fullpipe memory": lambda: (alone(fviews, [cs]), None), "XM both": lambda: (alone(fviews, [ext]), None),
     "D fullpipe": fpr}
for fn in V.values(): fn(); fn()
res = {k: [] for k in V}
items = list(V.items())
for r in range(10):
    for k, fn in items[r % len(items):] + items[:r % len(items)]:
        torch.cuda.synchronize()
        t0 = time.perf_counter(); call, inner_us = fn(); ms = (time.perf_counter() - t0) * 1e3
        res[k].append((ms, call, inner_us))
for k, v in res.items():
    print(f"  {k:28s} wall {statistics.median(a for a, _, _ in v):6.1f} ms  call {statistics.median(c for _, c, _ in v):6.0f} us"
          + (f"  f itself {statistics.median(i for _, _, i in v):6.0f} us" if v[0][2] is not None else "")
          + f"   calls {[round(c) for _, c, _ in v]}")
from torch.profiler import profile, ProfilerActivity
for name in ("A alone", "D fullpipe"):
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        V[name]()
    print("==", name)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14))
