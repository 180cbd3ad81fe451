"""p360: the variable-length list at --quick's size (defaults: threads): (1) cProfile of the caller's thread over
20 runs (tottime, fullpipe functions), (2) fullpipe against compute alone in alternating rounds in four process
states: fresh; a DataLoader's 4 persistent forked workers alive; after they are shut down; 1 GiB pageable + 256 MiB
pinned host memory alive and touched."""
import cProfile, pstats, io, statistics, sys, time, gc
import torch
import fullpipe as fp
from fullpipe.experiments import workloads as W

dev = torch.device("cuda")
gen = torch.Generator().manual_seed(1414)
w = W._variable_length(torch, dev, 256 * 1024, gen, seed=14)
xs, ys, f = w.xs, w.ys, w.f
n = len(xs)
print(f"{n} batches", flush=True)
p = fp.StreamPipeline(f)
for _ in range(14):
    p.run_batches(xs, outs=ys)
print("list_path", (p.stats.list_path or {}).get("path"), flush=True)
stream = torch.cuda.Stream()
alone = W._compute_alone(torch, dev, f, xs, stream)

def rounds(label, k=10):
    a, b, calls, walls = [], [], [], []
    for _ in range(k):
        t = time.perf_counter(); alone(); a.append((time.perf_counter() - t) * 1e3)
        torch.cuda.synchronize()
        t = time.perf_counter(); p.run_batches(xs, outs=ys); b.append((time.perf_counter() - t) * 1e3)
        st = p.stats
        calls.append(st.host_us.get("compute_call", 0)); walls.append(st.wall_ms)
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"RESULT {label:28s} alone {ma:6.2f} ms  fullpipe {mb:6.2f} ms (stats.wall {statistics.median(walls):6.2f})"
          f"  ratio {ma / mb:.3f}  call {statistics.median(calls):6.0f} us  path {(p.stats.list_path or {}).get('path')}",
          flush=True)

rounds("fresh")
# (1) profile
pr = cProfile.Profile()
torch.cuda.synchronize()
pr.enable()
for _ in range(20):
    p.run_batches(xs, outs=ys)
pr.disable()
s = io.StringIO()
st = pstats.Stats(pr, stream=s).sort_stats("tottime")
st.print_stats(45)
print(s.getvalue()[:12000])
s = io.StringIO()
st = pstats.Stats(pr, stream=s).sort_stats("cumtime")
st.print_stats("fullpipe", 60)
print(s.getvalue()[:14000])
rounds("fresh again")
# (2) a DataLoader with persistent forked workers
loader = W._DataLoaderPeer(torch, xs)
loader(torch, dev, f, ys, stream)
rounds("dataloader workers alive")
loader.close(); del loader; gc.collect()
rounds("dataloader closed")
big = torch.empty(256 * 1024 * 1024, dtype=torch.float32); big.fill_(1.0)
pin = torch.empty(64 * 1024 * 1024, dtype=torch.float32, pin_memory=True); pin.fill_(1.0)
rounds("1 GiB pageable + pinned alive")
del big, pin; gc.collect()
rounds("freed")
