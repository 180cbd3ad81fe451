"""p144 (session 23): resnet18 reduce-overhead (serial calls) vs eager through fullpipe on a pageable input
kept pageable (pin_in_place=False: staged through the ring every run). Medians of 5 alternating rounds."""
import time, statistics, warnings
import torch, torchvision, fullpipe as fp
warnings.simplefilter("ignore")
perf = time.perf_counter
torch.manual_seed(0)
pool = fp.DevicePool(0, release_threshold="max")
m = torchvision.models.resnet18().cuda().half().to(memory_format=torch.channels_last).eval()
def wrap(model):
    @torch.inference_mode()
    def f(x):
        return model(x.half().div_(255).contiguous(memory_format=torch.channels_last)).float()
    return f
c = torch.compile(m, mode="reduce-overhead")
fc, fe = wrap(c), wrap(m)
x = torch.randint(0, 255, (2048, 3, 224, 224), dtype=torch.uint8)
xd = [x[i:i + 128].cuda() for i in range(0, len(x), 128)]
for _ in range(3): fc(xd[0])
pc = fp.StreamPipeline(fc, pool=pool, pin_in_place=False)
pe = fp.StreamPipeline(fe, pool=pool, pin_in_place=False)
pc128 = fp.StreamPipeline(fc, pool=pool, pin_in_place=False, chunk=128)
for p in (pc, pe, pc128):
    t0 = perf(); p.run(x); print(f"first run {(perf() - t0) * 1e3:.0f} ms", flush=True)
def timed(fn):
    torch.cuda.synchronize(); t0 = perf(); fn(); torch.cuda.synchronize(); return (perf() - t0) * 1e3
named = [("compiled alone", lambda: [fc(b) for b in xd]), ("fp compiled auto", lambda: pc.run(x)),
         ("fp compiled chunk=128", lambda: pc128.run(x)), ("fp eager auto", lambda: pe.run(x))]
ts = {k: [] for k, _ in named}
for r in range(5):
    for k, fn in named[r % 4:] + named[:r % 4]:
        ts[k].append(timed(fn))
med = {k: statistics.median(v) for k, v in ts.items()}
for k, v in med.items():
    print(f"  {k:22s} {v:7.1f} ms ({med['compiled alone'] / v:.2f}x compiled alone)  all {[round(t) for t in ts[k]]}", flush=True)
for name, p in (("compiled auto", pc), ("compiled 128", pc128), ("eager auto", pe)):
    st = p.stats
    print(f"{name}: wall {st.wall_ms:.1f} busy {({k: round(v, 1) for k, v in st.busy_ms.items()})} staging {st.staging} "
          f"host_us {({k: round(v) for k, v in st.host_us.items()})} batches {st.batches} chunk {st.chunk['rows']}", flush=True)
