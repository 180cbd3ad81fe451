"""p125 (session 21): a new user's data in files and other shapes of use, not in the tests: a read-only
np.load(mmap_mode='r') input over three runs (the second would pin it in place), out= a writable memmap,
a read-only array as out=, a torch tensor over a memmap, 10k one-row batches, one pipeline run from two
threads at once, a 4 GiB pageable array, a CuPy function on NumPy. Each printed as OK / the error, with
time against the naive loop where it matters."""
import os, tempfile, threading, time, traceback, warnings
import numpy as np, torch, fullpipe as fp
warnings.simplefilter("ignore")
torch.manual_seed(0)
dev = "cuda"
lin = torch.nn.Linear(256, 256).to(dev).eval()
@torch.inference_mode()
def f(x):
    return lin(x.float())
def ref(x):
    out = np.empty((x.shape[0], 256), np.float32)
    with torch.inference_mode():
        for a in range(0, x.shape[0], 1 << 16):
            out[a:a + (1 << 16)] = lin(torch.as_tensor(np.asarray(x[a:a + (1 << 16)])).float().to(dev)).cpu().numpy()
    return out
def case(name, fn):
    t0 = time.perf_counter()
    try:
        r = fn()
        print(f"[ok]   {name} ({(time.perf_counter() - t0) * 1e3:.0f} ms): {r}", flush=True)
    except Exception as e:
        msg = str(e).replace("\n", " ")[:400]
        notes = " | ".join(getattr(e, "__notes__", []))[:200]
        print(f"[err]  {name}: {type(e).__name__}: {msg} {('NOTES: ' + notes) if notes else ''}", flush=True)
def close(a, b):
    a = a.numpy() if hasattr(a, "numpy") else np.asarray(a)
    return bool(np.allclose(a, b, rtol=1e-3, atol=1e-3))
def timed(fn):
    t0 = time.perf_counter(); r = fn(); torch.cuda.synchronize(); return r, (time.perf_counter() - t0) * 1e3
tmp = tempfile.mkdtemp(dir="/tmp")
x = np.random.standard_normal((1_000_000, 256)).astype(np.float32)  # 1.02 GB
path = os.path.join(tmp, "x.npy"); np.save(path, x)
want = ref(x)
pipe = fp.StreamPipeline(f)
xm = np.load(path, mmap_mode="r")
def mm_runs():
    out = []
    for r in range(3):
        y, ms = timed(lambda: pipe.run(xm))
        out.append((round(ms), close(y, want), pipe.stats.staging, pipe.stats.pinned.get("in_place")))
    return out
case("read-only memmap input, 3 runs (ms, correct, staging, in_place)", mm_runs)
def naive_mm():
    def go():
        out = np.empty((xm.shape[0], 256), np.float32)
        with torch.inference_mode():
            for a in range(0, xm.shape[0], 1 << 17):
                out[a:a + (1 << 17)] = f(torch.from_numpy(np.ascontiguousarray(xm[a:a + (1 << 17)])).to(dev)).cpu().numpy()
        return out
    go(); return round(timed(go)[1])
case("naive loop over the memmap (ms)", naive_mm)
ym = np.lib.format.open_memmap(os.path.join(tmp, "y.npy"), mode="w+", dtype=np.float32, shape=(x.shape[0], 256))
def out_mm():
    res = []
    for r in range(3):
        _, ms = timed(lambda: pipe.run(x, out=ym))
        res.append((round(ms), close(ym, want), pipe.stats.staging))
    ym.flush()
    return res, close(np.load(os.path.join(tmp, "y.npy"), mmap_mode="r"), want)
case("out= writable memmap, 3 runs; file holds it", out_mm)
ro = np.empty((x.shape[0], 256), np.float32); ro.setflags(write=False)
case("out= a read-only array (should refuse)", lambda: pipe.run(x, out=ro).shape)
case("read-only memmap as out= (should refuse)", lambda: pipe.run(x, out=np.load(os.path.join(tmp, "y.npy"), mmap_mode="r")).shape)
case("torch tensor over the memmap (from_numpy of mode r)", lambda: close(pipe.run(torch.from_numpy(np.load(path, mmap_mode="r"))), want))
case("mmap_mode='c' (copy-on-write) input, 2 runs", lambda: [close(pipe.run(np.load(path, mmap_mode="c")), want) for _ in range(2)])
rows = [x[i:i + 1] for i in range(10_000)]
def tiny():
    p = fp.StreamPipeline(f)
    _, first = timed(lambda: p.run_batches(rows))
    ys, ms = timed(lambda: p.run_batches(rows))
    ok = all(close(y, want[i:i + 1]) for i, y in enumerate(ys[:50]))
    def naive():
        with torch.inference_mode():
            return [f(torch.from_numpy(r).to(dev)).cpu() for r in rows]
    naive(); _, nms = timed(naive)
    return f"first {first:.0f} ms, second {ms:.0f} ms, naive {nms:.0f} ms, correct {ok}, hint: {str(p.stats.chunk)[:80]}"
case("10k one-row batches (run_batches)", tiny)
def two_threads():
    errs, outs = [], {}
    def go(k):
        try:
            outs[k] = close(pipe.run(x[:200_000]), want[:200_000])
        except Exception as e:
            errs.append(f"{type(e).__name__}: {str(e)[:160]}")
    ts = [threading.Thread(target=go, args=(k,)) for k in range(2)]
    for t in ts: t.start()
    for t in ts: t.join()
    return outs, errs
case("one pipeline, run() from two threads at once", two_threads)
def big():
    xb = np.random.standard_normal((4_200_000, 256)).astype(np.float32)  # 4.3 GB
    g = lambda t: t * 2
    p = fp.StreamPipeline(g)
    res = []
    for r in range(2):
        y, ms = timed(lambda: p.run(xb))
        res.append((round(ms), bool(np.array_equal(y[::997], xb[::997] * 2)), p.stats.staging, round(p.stats.bytes_in / ms / 1e6, 1)))
    return res
case("4.3 GB pageable, t*2, 2 runs (ms, exact, staging, GB/s in)", big)
try:
    import cupy as cp
    def cupy_fn(a):
        return cp.fft.rfft(a, axis=1).real.astype(cp.float32)
    z = x[:200_000]
    case("CuPy rfft over NumPy rows", lambda: bool(np.allclose(fp.StreamPipeline(cupy_fn).run(z), np.fft.rfft(z, axis=1).real, rtol=1e-3, atol=1e-2)))
except ImportError as e:
    print("cupy:", e)
