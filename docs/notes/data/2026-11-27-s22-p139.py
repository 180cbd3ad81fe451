"""p139 (session 22): short lists the short way, pageable inputs staged through pinned memory or not
(plain.STAGE_PAGEABLE_INPUTS), against the naive loop, interleaved call by call, every contender in every
position, medians of 300, us."""
import time, statistics
import torch, fullpipe as fp
import fullpipe.pipeline.plain as PL
perf = time.perf_counter
lin = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 1024)).cuda().to(torch.bfloat16).eval()
@torch.inference_mode()
def mlp(x):
    return lin(x.to(torch.bfloat16)).float()
def interleaved(fns, n=300):
    for _ in range(10):
        for fn in fns: fn()
    ts = [[] for _ in fns]
    m = len(fns)
    for i in range(n):
        for k in [(i + j) % m for j in range(m)]:
            t0 = perf(); fns[k](); ts[k].append(perf() - t0)
    return [statistics.median(t) * 1e6 for t in ts]
def staged(flag, pipe, xs):
    def run():
        PL.STAGE_PAGEABLE_INPUTS = flag
        try: pipe.run_batches(xs)
        finally: PL.STAGE_PAGEABLE_INPUTS = True
    return run
gen = torch.Generator().manual_seed(5)
print(f"{'compute':8s} {'k':>3s} {'KiB':>5s}  naive   staged (x naive)   pageable .to() (x naive)")
for fname, f in (("x*2", lambda x: x * 2), ("bf16 MLP", mlp)):
    pipe = fp.StreamPipeline(f)
    for k in (2, 16):
        for kb in (64, 256):
            xs = [torch.randn(kb * 256 // 1024, 1024, generator=gen) for _ in range(k)]
            pipe.run_batches(xs)
            a = staged(True, pipe, xs); b = staged(False, pipe, xs)
            a(); b()
            assert pipe.stats.staging["input"] == "plain"
            naive, sa, sb = interleaved([lambda: [f(x.cuda(non_blocking=True)).cpu() for x in xs], a, b])
            print(f"{fname:8s} {k:3d} {kb:5d} {naive:7.1f}  {sa:7.1f} ({naive / sa:.2f}x)  {sb:7.1f} ({naive / sb:.2f}x)", flush=True)
    pipe.close()
