"""Session 35: compute_threads="auto" from user threads. The bench's encoder list (cuDNN SDPA
off: first calls cheap), 14 run_batches per pipeline: one thread, then 4 user threads each
with its own pipeline at once (the compute threads are the process's, shared), defaults
against compute_threads=1. Outputs checked against one thread's calls."""
import random, statistics, threading, time
import torch
import fullpipe as fp

torch.backends.cuda.enable_cudnn_sdp(False)
with torch.device("cuda"):
    emb = torch.nn.Embedding(32000, 1024, dtype=torch.bfloat16).eval()
    layer = torch.nn.TransformerEncoderLayer(1024, 16, 4096, dropout=0.0, activation="gelu", batch_first=True,
                                             dtype=torch.bfloat16).eval()


def enc(ids):
    with torch.inference_mode():
        return layer(emb(ids)).float().mean(dim=1)


rnd = random.Random(14); g = torch.Generator().manual_seed(0); bx = []; tok = 0
while tok < 1 << 20:
    seq = rnd.choice((64, 128, 256, 512)); b = max(1, rnd.randint(2048, 16384) // seq)
    bx.append(torch.randint(0, 32000, (b, seq), dtype=torch.int32, generator=g)); tok += b * seq
ref = [enc(x.cuda()).cpu() for x in bx]
t0 = time.perf_counter()
for x in bx:
    enc(x.cuda())
torch.cuda.synchronize()
print(f"alone-ish (naive, one thread): {(time.perf_counter() - t0) * 1e3:.1f} ms a list", flush=True)


def user(threads, out, k):
    with fp.StreamPipeline(enc, compute_threads=threads) as pipe:
        ts = []
        for _ in range(14):
            t0 = time.perf_counter(); ys = pipe.run_batches(bx); ts.append(time.perf_counter() - t0)
        err = max(float((a - b).abs().max()) for a, b in zip(ys, ref))
        out[k] = (pipe.stats.list_path["path"], statistics.median(ts[-4:]) * 1e3, err)


for users in (1, 4):
    for threads in ("auto", 1):
        out = {}
        t0 = time.perf_counter()
        th = [threading.Thread(target=user, args=(threads, out, k)) for k in range(users)]
        [t.start() for t in th]; [t.join() for t in th]
        wall = time.perf_counter() - t0
        print(f"{users} user threads, compute_threads={threads!r}: wall {wall:.2f} s; per pipeline (path, median ms of "
              f"the last 4 runs, max err): {[out.get(k) for k in range(users)]}", flush=True)
