"""Session 35: what the compute threads' first run pays (per-thread caches), for the bench's
encoder over 127 token batches, by attention backend. One process per backend: the threads
are the process's, cold at the start."""
import random, sys, time
import torch
import fullpipe as fp

which = sys.argv[1]
if which == "no-cudnn":
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
shapes = len({tuple(x.shape) for x in bx})
t0 = time.perf_counter()
for x in bx:
    enc(x.cuda())
torch.cuda.synchronize()
first_here = time.perf_counter() - t0
t0 = time.perf_counter()
for x in bx:
    enc(x.cuda())
torch.cuda.synchronize()
second_here = time.perf_counter() - t0
with fp.StreamPipeline(enc, compute_threads=3) as pipe:
    ts = []
    for _ in range(3):
        t0 = time.perf_counter(); pipe.run_batches(bx); ts.append(time.perf_counter() - t0)
print(f"{which}: {len(bx)} batches, {shapes} shapes; this thread first {first_here:.2f} s, second {second_here:.3f} s; "
      f"3 compute threads: runs {' '.join(f'{t:.3f}' for t in ts)} s", flush=True)
