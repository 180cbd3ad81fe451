"""p143 (session 23): a new user's reduce-overhead torchvision model through fullpipe with its defaults,
and a CuPy function returning one reused buffer. resnet18 fp16 channels_last, random weights, 2048 pageable
uint8 224x224 images: fullpipe (serial calls) against the naive loop with the same compiled model and
compiled compute alone (device-resident); outputs against the eager model's."""
import time, statistics, warnings
import numpy as np, torch, torchvision, fullpipe as fp
perf = time.perf_counter
torch.manual_seed(0)
pool = fp.DevicePool(0, release_threshold="max")
# (a) CuPy: one reused output buffer
try:
    if __import__("os").environ.get("P143_SKIP_CUPY"):
        raise RuntimeError("skipped")
    import cupy as cp
    buf = {}
    def cf(x):
        b = buf.get(x.shape)
        if b is None:
            b = buf[x.shape] = cp.empty(x.shape, cp.float32)
        cp.multiply(x, 2, out=b)
        return b
    xc = np.random.default_rng(1).random((262144, 256), dtype=np.float32)  # 256 MiB
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with fp.StreamPipeline(cf, pool=pool, form="cupy", chunk="8MiB") as pipe:
            bad = []
            for _ in range(3):
                y = pipe.run(xc)
                bad.append(int((y != xc * 2).any(axis=1).sum()))
            print(f"cupy reused buffer: rows off per run {bad}; serial: {pipe.stats.compute_serial is not None}; "
                  f"warnings {[str(x.message)[:60] for x in w if 'one after another' in str(x.message)]}", flush=True)
except Exception as e:
    print("cupy part:", type(e).__name__, str(e)[:300], flush=True)
# (b) resnet18 reduce-overhead
m = torchvision.models.resnet18().cuda().half().to(memory_format=torch.channels_last).eval()
def wrap(model):
    @torch.inference_mode()
    def f(x):
        return model(x.half().div_(255).contiguous(memory_format=torch.channels_last)).float()
    return f
t0 = perf()
c = torch.compile(m, mode="reduce-overhead")
fc, fe = wrap(c), wrap(m)
x = torch.randint(0, 255, (2048, 3, 224, 224), dtype=torch.uint8)
chunk = 128
xd = [x[i:i + chunk].cuda() for i in range(0, len(x), chunk)]
for _ in range(3):
    fc(xd[0])
print(f"compile + warm-up {perf() - t0:.1f} s", flush=True)
ref = torch.cat([fe(b).cpu() for b in xd])
pipe = fp.StreamPipeline(fc, pool=pool)
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    t0 = perf(); y0 = pipe.run(x); first = (perf() - t0) * 1e3
print(f"first fullpipe run {first:.0f} ms; serial: {pipe.stats.compute_serial}; max err {float((y0 - ref).abs().max()):.4f}", flush=True)
def timed(fn):
    torch.cuda.synchronize(); t0 = perf(); fn(); torch.cuda.synchronize(); return (perf() - t0) * 1e3
outs = {}
pipe128 = fp.StreamPipeline(fc, pool=pool, chunk=128)
pipe128.run(x)
pipe_e = fp.StreamPipeline(fe, pool=pool)
pipe_e.run(x); pipe_e.run(x)
named = [("compiled alone", lambda: [fc(b) for b in xd]),
         ("fullpipe chunk=128", lambda: pipe128.run(x)), ("fullpipe eager", lambda: pipe_e.run(x)),
         ("naive compiled", lambda: outs.__setitem__("naive", torch.cat([fc(x[i:i + chunk].cuda()).cpu() for i in range(0, len(x), chunk)]))),
         ("fullpipe compiled", lambda: outs.__setitem__("fullpipe", pipe.run(x)))]
ts = {k: [] for k, _ in named}
for r in range(5):
    for k, fn in named[r % len(named):] + named[:r % len(named)]:
        ts[k].append(timed(fn))
med = {k: statistics.median(v) for k, v in ts.items()}
for k, v in med.items():
    print(f"  {k:18s} {v:7.1f} ms  ({med['compiled alone'] / v:.2f}x compiled alone)", flush=True)
print("  max err vs eager:", {k: round(float((v - ref).abs().max()), 4) for k, v in outs.items()},
      "chunk", pipe.stats.chunk["rows"], "batches", pipe.stats.batches, flush=True)
for name, p in (("auto", pipe), ("chunk=128", pipe128), ("eager auto", pipe_e)):
    st = p.stats
    print(f"{name}: wall {st.wall_ms:.1f} ms, busy {({k: round(v, 1) for k, v in st.busy_ms.items()})}, staging {st.staging}, "
          f"host_us {({k: round(v) for k, v in st.host_us.items()})}, batches {st.batches}, serial {st.compute_serial is not None}", flush=True)
    print("   chunk:", (st.chunk or {}).get("reason", "")[:400], flush=True)
