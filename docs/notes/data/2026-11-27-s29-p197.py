"""Session 29, a new user's side with the grouped calls (defaults), workloads in no test:
CuPy function over a list, mobilenet_v3_small over pageable images, a GRU over variable
sequences, tiny MLP batches, 4 threads each with its own pipeline. Each: outputs against
the naive loop, fullpipe (defaults) against compute alone (device-resident, one stream),
medians of alternating rounds."""
import time, statistics, threading
import numpy as np, torch, cupy as cp
import fullpipe as fp

def rounds(cands, n=7):
    res = {k: [] for k in cands}; items = list(cands.items())
    for r in range(n):
        for k, fn in items[r % len(items):] + items[:r % len(items)]:
            torch.cuda.synchronize(); cp.cuda.Device().synchronize()
            t0 = time.perf_counter(); fn(); res[k].append((time.perf_counter() - t0) * 1e3)
    return {k: statistics.median(v) for k, v in res.items()}

def report(name, med, pipe, err):
    a, f = med["alone"], med["fullpipe"]
    print(f"{name}: fullpipe {f:.1f} ms = {a / f:.3f}x compute alone ({a:.1f} ms); naive {med.get('naive', float('nan')):.1f} ms; "
          f"max err {err:.2e}; call_group {pipe.stats.call_group}; host/batch {({k: round(v) for k, v in pipe.stats.host_us.items()})}", flush=True)

rng = np.random.default_rng(0)
# 1. CuPy: a softmax-ish row function over a list of variable batches
xs = [rng.standard_normal((int(r), 1024), dtype=np.float32) for r in rng.integers(200, 4000, 60)]
def cfun(x):
    e = cp.exp(x - x.max(axis=1, keepdims=True)); return (e / e.sum(axis=1, keepdims=True)) @ cp.ones((1024, 64), cp.float32)
ref = [cp.asnumpy(cfun(cp.asarray(x))) for x in xs]
pc = fp.StreamPipeline(cfun, form="cupy")
got = pc.run_batches(xs)
err = max(float(np.abs(g - r).max()) for g, r in zip(got, ref))
xd = [cp.asarray(x) for x in xs]; s = cp.cuda.Stream(non_blocking=True)
def alone_cp():
    with s:
        for x in xd: cfun(x)
    s.synchronize()
def naive_cp():
    for x in xs: cp.asnumpy(cfun(cp.asarray(x)))
report("cupy softmax@W, 60 batches 200-4000 x 1024", rounds({"alone": alone_cp, "fullpipe": lambda: pc.run_batches(xs), "naive": naive_cp}), pc, err)

tdev = torch.device("cuda"); ts = torch.cuda.Stream()
def torch_case(name, f, batches, n=7):
    ref = []
    for x in batches:
        ref.append(f(x.to(tdev)).cpu())
    p = fp.StreamPipeline(f)
    got = p.run_batches(batches)
    err = max(float((g.float() - r.float()).abs().max() / (r.float().abs().max() + 1e-6)) for g, r in zip(got, ref))
    dev = [x.to(tdev) for x in batches]
    def alone():
        with torch.cuda.stream(ts):
            for x in dev: f(x)
        ts.synchronize()
    def naive():
        for x in batches: f(x.to(tdev)).cpu()
    report(name, rounds({"alone": alone, "fullpipe": lambda: p.run_batches(batches), "naive": naive}, n), p, err)
    return p

# 2. mobilenet_v3_small fp16 channels_last over pageable uint8 images (run() over one array)
import torchvision
net = torchvision.models.mobilenet_v3_small().eval().half().to(tdev).to(memory_format=torch.channels_last)
def mnet(t):
    with torch.inference_mode():
        x = t.permute(0, 3, 1, 2).half().div_(255)
        return net(x.contiguous(memory_format=torch.channels_last)).float()
imgs = torch.randint(0, 256, (2048, 160, 160, 3), dtype=torch.uint8)
pm = fp.StreamPipeline(mnet)
ym = pm.run(imgs); ym = pm.run(imgs)
refm = torch.cat([mnet(c.to(tdev)).cpu() for c in imgs.split(256)])
errm = float((ym - refm).abs().max() / refm.abs().max())
dev_chunks = [c.to(tdev) for c in imgs.split(256)]
def alone_m():
    with torch.cuda.stream(ts):
        for c in dev_chunks: mnet(c)
    ts.synchronize()
def naive_m():
    for c in imgs.split(256): mnet(c.to(tdev)).cpu()
report("mobilenet_v3_small fp16 CL, 2048 pageable 160x160 uint8 images, run()", rounds({"alone": alone_m, "fullpipe": lambda: pm.run(imgs), "naive": naive_m}, 5), pm, errm)

# 3. a GRU over variable-length sequences (batches of random batch size and length)
gru = torch.nn.GRU(256, 512, num_layers=2, batch_first=True).to(tdev).eval()
def gfun(x):
    with torch.inference_mode():
        return gru(x)[0][:, -1]
gb = [torch.randn(int(b), int(l), 256) for b, l in zip(rng.integers(8, 64, 40), rng.choice([32, 64, 128], 40))]
torch_case("GRU 2x512 over 40 batches of 8-64 sequences of 32-128 steps", gfun, gb)

# 4. tiny MLP batches (host-bound by nature)
mlp = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).to(tdev).eval()
def mfun(x):
    with torch.inference_mode():
        return mlp(x)
tb = [torch.randn(int(r), 512) for r in rng.integers(4, 32, 300)]
torch_case("MLP 512-2048-512 fp32 over 300 batches of 4-32 rows", mfun, tb)

# 5. 4 threads, each its own pipeline on one shared pool, the MLP over its own list
pool = fp.DevicePool(fp.Device(0), release_threshold="max")
errs, outs = [], {}
def worker(i):
    try:
        with fp.StreamPipeline(mfun, streams=3, pool=pool) as p:
            for _ in range(5):
                ys = p.run_batches(tb[i::4])
            outs[i] = (ys, p.stats.call_group)
    except Exception as e:  # noqa
        errs.append(repr(e))
th = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
[t.start() for t in th]; [t.join() for t in th]
ok = not errs and all(all(torch.allclose(y, mfun(x.to(tdev)).cpu(), atol=1e-4) for y, x in zip(outs[i][0], tb[i::4])) for i in range(4))
print(f"4 threads x own pipeline on one pool: errors {errs}, outputs right {ok}, call_group {[outs[i][1] for i in outs]}, pool {pool.stats() if callable(getattr(pool, 'stats', None)) else ''}")
