"""What the copy-heavy MLP's ring probes read: chunk='auto' on 1 GiB pageable float32 rows,
per probe batch host time split (front, call, back), then the same first run's choice."""
import time, numpy as np, torch
import fullpipe as fp
dev = torch.device("cuda")
mlp = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).to(dev, torch.bfloat16)
@torch.inference_mode()
def f(x):
    return mlp(x.to(torch.bfloat16)).float()
x = np.random.default_rng(0).random((262144, 1024), dtype=np.float32)
out = np.empty_like(x)
pipe = fp.StreamPipeline(f, pin_in_place=False)
for r in range(3):
    t0 = time.perf_counter(); pipe.run(x, out=out); ms = (time.perf_counter() - t0) * 1e3
    c = pipe.stats.chunk
    print(f"run {r}: {ms:.1f} ms, chunk {c['bytes']/2**20:.1f} MiB source {c['source']} host_us {dict((k, round(v)) for k, v in pipe.stats.host_us.items())}")
    if r == 0:
        ps = pipe.probe_stats
        print("  last probe run: enqueue_us per batch", [round(v) for v in ps.enqueue_us], "host_us", dict((k, round(v)) for k, v in ps.host_us.items()))
        print("  reason:", c["reason"][:300])
