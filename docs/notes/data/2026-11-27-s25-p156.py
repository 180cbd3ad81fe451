"""copy-heavy MLP (bf16 1024->4096->1024, 1 GiB pageable float32 in and out): chunk='auto'
against fixed 16 / 64 MiB chunks, alternating runs in one process; each run's chunk, staging,
wall time and host time per batch (front / call / back / staging wait)."""
import time, statistics, numpy as np, torch
import fullpipe as fp
dev = torch.device("cuda")
torch.manual_seed(0)
mlp = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).to(dev, torch.bfloat16)
@torch.inference_mode()
def f(x):
    return mlp(x.to(torch.bfloat16)).float()
x = np.random.default_rng(0).random((262144, 1024), dtype=np.float32)
out = np.empty_like(x)
pipes = {"auto": fp.StreamPipeline(f), "16MiB": fp.StreamPipeline(f, chunk="16MiB"), "64MiB": fp.StreamPipeline(f, chunk="64MiB"),
         "auto_t0": None}
res = {k: [] for k in pipes}
for r in range(7):
    for k, p in pipes.items():
        if p is None:
            continue
        t0 = time.perf_counter(); p.run(x, out=out); ms = (time.perf_counter() - t0) * 1e3
        s = p.stats
        res[k].append(ms)
        print(f"r{r} {k:6s} {ms:6.1f} ms chunk {s.bytes_in/s.batches/2**20:.1f} batches {s.batches} staging {s.staging['input'][:6]}/{s.staging['output'][:6]} "
              f"timed {s.timed_batches} host_us " + str({k2: round(v) for k2, v in s.host_us.items()}))
    if r == 1:
        c = pipes["auto"].stats.chunk
        print("   auto:", c["reason"][:200])
for k, v in res.items():
    if v: print(f"{k:6s} median {statistics.median(v[2:]):.1f} ms (runs 3-7)")
