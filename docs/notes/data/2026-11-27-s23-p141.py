"""p141 (session 23): what serial calls cost. torch.compile(mode="reduce-overhead") models through
fullpipe (calls turned serial) against the naive loop with the same compiled model, fullpipe with the
eager model (calls concurrent on 3 streams), fullpipe graph=True with the eager model, and compute alone
(compiled, device-resident). 256 MiB pageable float32 in; medians of alternating rounds (ms)."""
import time, statistics, warnings
import torch, fullpipe as fp
warnings.simplefilter("ignore")
torch.manual_seed(0)
perf = time.perf_counter
pool = fp.DevicePool(0, release_threshold="max")
def sync_time(fn):
    torch.cuda.synchronize(); t0 = perf(); fn(); torch.cuda.synchronize(); return (perf() - t0) * 1e3
def rounds(named, n=5):
    for _, fn in named: fn()
    ts = {k: [] for k, _ in named}
    for r in range(n):
        order = named[r % len(named):] + named[:r % len(named)]
        for k, fn in order: ts[k].append(sync_time(fn))
    return {k: statistics.median(v) for k, v in ts.items()}
cases = []
mlp = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda().to(torch.bfloat16).eval()
cases.append(("bf16 MLP 1024-4096-1024", mlp, torch.randn(65536, 1024), 4096, lambda m: (lambda x: m(x.to(torch.bfloat16)).float())))
conv = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(64, 128, 3, stride=2, padding=1), torch.nn.ReLU(),
                           torch.nn.Conv2d(128, 128, 3, stride=2, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                           torch.nn.Linear(128, 10)).cuda().half().to(memory_format=torch.channels_last).eval()
cases.append(("fp16 convnet 64x64", conv, torch.randint(0, 255, (16384, 3, 64, 64), dtype=torch.uint8), 512,
              lambda m: (lambda x: m(x.half().div_(255).contiguous(memory_format=torch.channels_last)).float())))
for name, model, x, chunk, wrap in cases:
    torch._dynamo.reset()
    compiled = torch.compile(model, mode="reduce-overhead")
    f_c = torch.inference_mode()(wrap(compiled))
    f_e = torch.inference_mode()(wrap(model))
    xd = [x[i:i + chunk].cuda() for i in range(0, len(x), chunk)]
    for _ in range(3): f_c(xd[0]); f_e(xd[0])
    ref = torch.cat([f_e(b).cpu() for b in xd])
    p_c = fp.StreamPipeline(f_c, pool=pool)
    p_e = fp.StreamPipeline(f_e, pool=pool)
    p_g = fp.StreamPipeline(f_e, pool=pool, graph=True, chunk=f"{chunk * x[0].nbytes // 2**20}MiB")
    outs = {}
    def alone_c(): [f_c(b) for b in xd]
    def alone_e(): [f_e(b) for b in xd]
    def naive_c(): outs["naive"] = torch.cat([f_c(x[i:i + chunk].cuda()).cpu() for i in range(0, len(x), chunk)])
    def fp_c(): outs["fp compiled"] = p_c.run(x)
    def fp_e(): outs["fp eager"] = p_e.run(x)
    def fp_g(): outs["fp graph=True"] = p_g.run(x)
    t0 = perf(); fp_c(); first = (perf() - t0) * 1e3
    res = rounds([("compiled alone", alone_c), ("eager alone", alone_e), ("naive compiled", naive_c),
                  ("fp compiled (serial)", fp_c), ("fp eager", fp_e), ("fp eager graph=True", fp_g)])
    errs = {k: float((v.float() - ref.float()).abs().max()) for k, v in outs.items()}
    print(f"{name}: first fullpipe run of the compiled model {first:.0f} ms; serial: {p_c.stats.compute_serial is not None}; "
          f"chunk {p_c.stats.chunk['bytes'] >> 20} MiB, batches {p_c.stats.batches}", flush=True)
    for k, v in res.items():
        print(f"   {k:22s} {v:8.1f} ms  ({res['compiled alone'] / v:.2f}x compiled alone)", flush=True)
    print("   max err vs eager:", {k: round(v, 3) for k, v in errs.items()}, flush=True)
    for p in (p_c, p_e, p_g): p.close()
