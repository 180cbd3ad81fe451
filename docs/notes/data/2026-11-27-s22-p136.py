"""p136 (session 22): a new user's first runs in a fresh process, run by run: y = pipe.run(x) five times over
one pageable array (bf16 MLP), each run's wall and what it did (staging, chunk and its source, probes, pinned
allocations, pin in place and its cost, busy and bound), the naive loop before and after. argv: MiB."""
import sys, time
import torch
mib = int(sys.argv[1])
perf = time.perf_counter
import fullpipe as fp
lin = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda().to(torch.bfloat16).eval()
@torch.inference_mode()
def f(x):
    return lin(x.to(torch.bfloat16)).float()
x = torch.randn(mib * 256, 1024)
f(x[:8].cuda()).cpu(); torch.cuda.synchronize()
def naive(chunk_rows=8192):
    out = torch.empty(x.shape[0], 1024)
    for a in range(0, x.shape[0], chunk_rows):
        out[a:a + chunk_rows] = f(x[a:a + chunk_rows].cuda()).cpu()
    return out
t0 = perf(); ref = naive(); print(f"== {mib} MiB: naive {1e3 * (perf() - t0):.1f} ms", flush=True)
t0 = perf(); pipe = fp.StreamPipeline(f); print(f"   StreamPipeline(f) {1e3 * (perf() - t0):.1f} ms")
for r in range(6):
    t0 = perf(); y = pipe.run(x); wall = perf() - t0
    st = pipe.stats
    ch = st.chunk or {}
    inp = st.pinned.get("in_place", {})
    print(f"   run {r}: {wall * 1e3:7.1f} ms  staging {st.staging}  chunk {ch.get('rows')} rows ({ch.get('bytes', 0) / 2**20:.0f} MiB, "
          f"{ch.get('source')}, probes {ch.get('probe_batches')})  pinned new {st.pinned.get('allocated_bytes', 0) / 2**20:.0f} MiB, "
          f"in place {inp}  stats.wall {st.wall_ms:.1f} busy { {k: round(v, 1) for k, v in st.busy_ms.items()} } "
          f"host_wait {st.host_wait_ms:.1f} probe wall {getattr(pipe.probe_stats, 'wall_ms', 0) or 0:.1f}", flush=True)
    assert float((y - ref).abs().max()) == 0.0
t0 = perf(); naive(); print(f"   naive again {1e3 * (perf() - t0):.1f} ms")
