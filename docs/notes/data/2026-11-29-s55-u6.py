"""u6: u5 with compute_threads=1 only (plain, as call 14 chose), its runs and compute alone in a loop for py-spy;
u5: u2's dict batches (ids int32 + bool mask, 60 batches) through an fp32 encoder layer with a padding mask, past
their list trials: defaults and compute_threads=1, against the naive loop and compute alone; then timed_loop (defaults)
for py-spy."""
import random, statistics, sys, time
import torch
import fullpipe as fp

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
dx = [{k: v.to(dev) for k, v in b.items()} for b in batches]
for b in dx:
    f(b)
pipes = {"threads=1": fp.StreamPipeline(f, compute_threads=1)}
for p in pipes.values():
    for _ in range(30):
        p.run_batches(batches)


def alone():
    for b in dx:
        f(b)


def naive():
    return [f({k: v.to(dev) for k, v in b.items()}).cpu() for b in batches]


cont = [("alone", alone), ("naive", naive)] + [(k, (lambda p=p: p.run_batches(batches))) for k, p in pipes.items()]
ts = {k: [] for k, _ in cont}
for _ in range(8):
    for k, fn in cont:
        torch.cuda.synchronize(); t = time.perf_counter(); fn(); torch.cuda.synchronize()
        ts[k].append((time.perf_counter() - t) * 1e3)
m = {k: statistics.median(v) for k, v in ts.items()}
for k, p in pipes.items():
    st = p.stats
    print(f"RESULT {k:10s} {m[k]:.1f} ms: {m['naive'] / m[k]:.2f}x naive ({m['naive']:.1f}), {m['alone'] / m[k]:.2f}x alone "
          f"({m['alone']:.1f}); way {(st.list_path or {}).get('path')} {({a: b for a, b in (st.list_path or {}).items() if 'us' in a})}; "
          f"staging {st.staging}; host_us {({a: round(b) for a, b in (st.host_us or {}).items()})}; wall {st.wall_ms:.1f}",
          flush=True)
p = pipes["threads=1"]


def timed_loop():
    for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 0):
        p.run_batches(batches)
        alone_loop()


def alone_loop():
    alone()
    torch.cuda.synchronize()


timed_loop()
