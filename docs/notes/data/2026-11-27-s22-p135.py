"""p135 (session 22): a new user's first run in a fresh process. torch initialised first (a tiny call of the
model), then: the naive loop over the array once; StreamPipeline(f).run(x) once, profiled (cProfile,
cumulative, fullpipe's functions); its 2nd and 3rd runs; the naive loop again. x pageable float32, a bf16 MLP
(copy-heavy class) or x*2. argv: MiB, compute."""
import cProfile, pstats, io, sys, time
import torch
mib, which = int(sys.argv[1]), sys.argv[2]
perf = time.perf_counter
t_import = perf()
import fullpipe as fp
t_import = perf() - t_import
if which == "mlp":
    lin = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda().to(torch.bfloat16).eval()
    @torch.inference_mode()
    def f(x):
        return lin(x.to(torch.bfloat16)).float()
else:
    def f(x):
        return x * 2
x = torch.randn(mib * 256, 1024)
f(x[:8].cuda()).cpu(); torch.cuda.synchronize()  # torch, cuBLAS initialised
def naive(chunk_rows=8192):
    out = torch.empty(x.shape[0], 1024)
    for a in range(0, x.shape[0], chunk_rows):
        out[a:a + chunk_rows] = f(x[a:a + chunk_rows].cuda()).cpu()
    return out
t0 = perf(); ref = naive(); t_naive1 = perf() - t0
pr = cProfile.Profile()
t0 = perf(); pr.enable(); pipe = fp.StreamPipeline(f); y = pipe.run(x); pr.disable(); t_first = perf() - t0
st1 = pipe.stats
runs = []
for _ in range(3):
    t0 = perf(); y = pipe.run(x); runs.append(perf() - t0)
t0 = perf(); naive(); t_naive2 = perf() - t0
err = float((y - ref).abs().max())
print(f"== {mib} MiB, {which}: import fullpipe {t_import * 1e3:.0f} ms; naive {t_naive1 * 1e3:.1f} ms (again {t_naive2 * 1e3:.1f}); "
      f"fullpipe first run {t_first * 1e3:.1f} ms (profiled), then {', '.join(f'{r * 1e3:.1f}' for r in runs)} ms; max err {err:.1e}")
print(f"   first run: chunk {st1.chunk.get('rows')} rows {st1.chunk.get('source')}, staging {st1.staging}, pinned {st1.pinned}")
s = io.StringIO()
ps = pstats.Stats(pr, stream=s).sort_stats("cumulative")
ps.print_stats(r"fullpipe|cuda|threading|memmove|ctypes", 45)
lines = [l for l in s.getvalue().splitlines() if l.strip()]
start = next(i for i, l in enumerate(lines) if "ncalls" in l)
for l in lines[start:start + 46]:
    print("   " + l[:190])
