"""p292: the two-level experiment's 'both' form at --quick size (24 requests, micro-batches of 4096 tokens) is
host-bound (session 43: SMs busy 59.6 %). Host enqueue time of a prefill against its GPU time, for 4096 and 8192
token micro-batches and level 2 alone (DecoderStack, whole batch); then cProfile of one 4096-token prefill."""
import cProfile, pstats, io, time, statistics
import torch
from fullpipe.models import StackConfig, StagedStack, DecoderStack, init_weights
from fullpipe.experiments.two_level import make_requests

config = StackConfig()
w = init_weights(config, seed=0, device="cuda")
reqs = make_requests(24, config.vocab)
print("tokens", sum(len(r) for r in reqs), flush=True)
staged = StagedStack(config, w, devices=[0])
level2 = DecoderStack(config, w, kernels="fullpipe", pool=None)


def timeit(fn, n=5):
    host, wall = [], []
    for _ in range(n):
        torch.cuda.synchronize(); t = time.perf_counter(); fn(); h = time.perf_counter(); torch.cuda.synchronize()
        host.append((h - t) * 1e3); wall.append((time.perf_counter() - t) * 1e3)
    return statistics.median(host), statistics.median(wall)


for mb in (4096, 8192):
    f = lambda: staged.prefill(reqs, microbatch_tokens=mb)
    f(); torch.cuda.synchronize()
    h, wl = timeit(f)
    print(f"RESULT both, micro-batches of {mb}: host enqueue {h:.1f} ms, wall {wl:.1f} ms", flush=True)
f2 = lambda: level2.prefill(reqs)
try:
    f2(); torch.cuda.synchronize()
    h, wl = timeit(f2)
    print(f"RESULT level 2 only: host enqueue {h:.1f} ms, wall {wl:.1f} ms", flush=True)
except Exception as e:
    print("level2 prefill:", type(e).__name__, e)
import sys
if 'noprofile' in sys.argv:
    raise SystemExit
pr = cProfile.Profile()
torch.cuda.synchronize()
pr.enable(); staged.prefill(reqs, microbatch_tokens=4096); pr.disable(); torch.cuda.synchronize()
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(35); print(s.getvalue()[:9000])
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("cumtime").print_stats(45); print(s.getvalue()[:9000])
