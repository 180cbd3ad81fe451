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


import inspect, textwrap
from fullpipe.pipeline import executor as EX
code = textwrap.dedent(inspect.getsource(EX.StreamPipeline._eager_loop))
i = code.index("    for pos in range(n):\n        fronts_upto(pos + L)")
grouped = code[:i] + """    G = N
    call_, finish_ = proto.call, proto.finish
    for g0 in range(0, n, G):
        g1 = min(g0 + G, n)
        fronts_upto(g1 - 1)
        got = []
        for pos in range(g0, g1):
            at[0] = pos
            p = pending[pos - g0]
            got.append((p, perf(), run.off_s, call_(p)))
        for pos, (p, t0, off, c) in zip(range(g0, g1), got):
            finish_(p, c, dst(p.b, p.slot))
            pending.popleft()
            settle(pos, p.b, p.slot, t0, off, front_us[pos])
"""
grouped = grouped.replace("def _eager_loop(", "def _grouped_loop(")
ns = dict(vars(EX)); exec(grouped, ns)
class Grouped(fp.StreamPipeline):
    _eager_loop = ns["_grouped_loop"]
pd = fp.StreamPipeline(enc); pg = Grouped(enc)
ref = [y.clone() for y in pd.run_batches(bx)]
got = pg.run_batches(bx)
print("grouped outputs equal:", all(torch.equal(a, b) for a, b in zip(ref, got)))
V = {"A alone": lambda: alone(bdev, [cs]), "D fullpipe": lambda: pd.run_batches(bx), "DG fullpipe, calls grouped by 3": lambda: pg.run_batches(bx)}
for fn in V.values(): fn(); fn()
res = {k: [] for k in V}
items = list(V.items())
for r in range(12):
    for k, fn in items[r % len(items):] + items[:r % len(items)]:
        torch.cuda.synchronize()
        t0 = time.perf_counter(); got = fn(); ms = (time.perf_counter() - t0) * 1e3
        c = got if k.startswith("A") else (pd if k.startswith("D ") else pg).stats.host_us.get("compute_call")
        res[k].append((ms, c))
for k, v in res.items():
    print(f"  {k:34s} wall {statistics.median(a for a, _ in v):6.1f} ms  call {statistics.median(c for _, c in v):6.0f} us   walls {[round(a) for a, _ in v]}")
