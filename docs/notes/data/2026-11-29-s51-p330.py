"""p330: a new user's tour, third round (session 51): workload classes no test or earlier tour has.
Each checked against a naive loop's outputs, first and third run timed against the naive loop's."""
import os, tempfile, threading, time, traceback, warnings
import numpy as np
import torch
import fullpipe as fp

dev = torch.device("cuda")
warnings.simplefilter("always")


def timed(fn):
    torch.cuda.synchronize(); t = time.perf_counter(); r = fn(); torch.cuda.synchronize()
    return r, (time.perf_counter() - t) * 1e3


def naive_loop(f, x, per):
    outs = []
    for i in range(0, len(x), per):
        xb = torch.as_tensor(np.asarray(x[i:i + per]) if isinstance(x, np.ndarray) else x[i:i + per]).to(dev)
        outs.append(f(xb).cpu())
    return torch.cat(outs)


def as_t(y):
    return y if isinstance(y, torch.Tensor) else torch.as_tensor(np.asarray(y))


def rel_err(y, ref):
    yt, rt = as_t(y), as_t(ref)
    if yt.shape != rt.shape:
        return float("inf")
    if not yt.is_floating_point():
        return float((yt != rt).float().mean().item())
    return ((yt.float() - rt.float()).abs().max() / rt.float().abs().max().clamp_min(1e-6)).item()


def case(name, f, x, per, tol, runs=3, **kw):
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        try:
            ref, t_naive1 = timed(lambda: naive_loop(f, x, per))
            _, t_naive3 = timed(lambda: naive_loop(f, x, per))
            with fp.StreamPipeline(f, **kw) as p:
                ts, y = [], None
                for _ in range(runs):
                    y, t = timed(lambda: p.run(x))
                    ts.append(t)
                err = rel_err(y, ref)
                st = p.stats
                line = (f"{name:40s} out {type(y).__module__.split('.')[0]}/{getattr(y, 'dtype', '?')} "
                        f"{tuple(getattr(y, 'shape', ()))} err {err:.2e} {'OK' if err <= tol else 'WRONG'} | fp "
                        f"{ts[0]:7.1f} / {ts[-1]:7.1f} ms, naive {t_naive1:7.1f} / {t_naive3:7.1f} -> last x"
                        f"{t_naive3 / ts[-1]:.2f} | chunk {st.chunk.get('rows')} {st.chunk.get('source')} "
                        f"staging {st.staging} serial {getattr(st, 'compute_serial', None)}")
        except Exception as e:  # noqa: BLE001
            line = f"{name:40s} RAISED {type(e).__name__}: {str(e)[:400]}"
            traceback.print_exc()
    print("RESULT " + line, flush=True)
    for w in ws:
        print(f"   WARN {w.category.__name__}: {str(w.message)[:300]}", flush=True)


torch.manual_seed(0)
inf = torch.inference_mode()
inf.__enter__()

# a. output 32x the input: a decoder-ish Linear to (64, 64) fp16 per row
dec = torch.nn.Linear(64, 64 * 64).to(dev, torch.float16).eval()
xa = np.random.default_rng(1).standard_normal((65536, 64)).astype(np.float32)  # 16 MiB in, 512 MiB out
case("a. output 32x input (fp16 out)", lambda t: dec(t.half()).view(-1, 64, 64), xa, 4096, 2e-2)

# b. tiny rows: 64M scalars, elementwise
xb = np.random.default_rng(2).random(64 << 20, dtype=np.float32)
case("b. 64M scalar rows, sin*2", lambda t: torch.sin(t) * 2, xb, 1 << 22, 1e-6)

# c. a compute with a CPU sync inside (.item())
mlp = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).to(dev).eval()
xc = np.random.default_rng(3).standard_normal((262144, 256)).astype(np.float32)  # 256 MiB
def f_sync(t):
    y = mlp(t)
    s = float(y.abs().max().item())  # a sync a user might write
    return y / s
def f_sync_ref(t):
    return f_sync(t)
case("c. compute with .item() (per-chunk max)", f_sync, xc, 16384, 1e30)  # per-chunk scale differs: shape check only
case("c2. same MLP without the sync", lambda t: mlp(t), xc, 16384, 1e-4)

# d. GRU over sequences: (N, T, F) -> last hidden
gru = torch.nn.GRU(64, 256, num_layers=2, batch_first=True).to(dev).eval()
xd = np.random.default_rng(4).standard_normal((32768, 32, 64)).astype(np.float32)  # 256 MiB
case("d. GRU 2x256 over (N,32,64)", lambda t: gru(t)[1][-1], xd, 2048, 1e-4)

# e. int64 ids -> argmax int64 (integer output)
emb = torch.nn.EmbeddingBag(50000, 128, mode="mean").to(dev).eval()
head = torch.nn.Linear(128, 10).to(dev).eval()
xe = np.random.default_rng(5).integers(0, 50000, (1 << 20, 16), dtype=np.int64)  # 128 MiB
case("e. int64 ids -> argmax int64", lambda t: head(emb(t)).argmax(dim=1), xe, 65536, 0.0)

# f. 3D volumes, big rows: (N, 1, 32, 128, 128) fp16 conv3d, 1 MiB a row
conv3 = torch.nn.Sequential(torch.nn.Conv3d(1, 8, 3, padding=1), torch.nn.ReLU(),
                            torch.nn.Conv3d(8, 1, 3, padding=1)).to(dev, torch.float16).eval()
xf = torch.randn(256, 1, 32, 128, 128, dtype=torch.float16)  # 256 MiB torch CPU fp16
case("f. conv3d volumes 1 MiB rows (fp16 tensor)", lambda t: conv3(t), xf, 16, 2e-2)

# g. non-contiguous output (a transpose / a slice)
lin = torch.nn.Linear(256, 512).to(dev).eval()
case("g1. output a column slice y[:, :100]", lambda t: lin(t)[:, :100], xc, 16384, 1e-4)
case("g2. output a transposed view (rows kept)", lambda t: lin(t).view(-1, 16, 32).transpose(1, 2), xc, 16384, 1e-4)

# h. identity and an in-place compute (aliasing the input chunk)
case("h1. identity lambda t: t", lambda t: t, xc, 16384, 0.0)
case("h2. in place t.mul_(2)", lambda t: t.mul_(2), xc, 16384, 0.0)

# i. one static buffer returned every call (a race unless serialized)
static = {}
def f_static(t):
    buf = static.get(t.shape)
    if buf is None:
        buf = static[t.shape] = torch.empty_like(t)
    torch.mul(t, 3, out=buf)
    return buf
case("i. static output buffer", f_static, xc, 16384, 0.0)

# j. float64
xj = np.random.default_rng(6).standard_normal((1 << 22, 16))  # 512 MiB float64
case("j. float64 rows, x @ W", lambda t: t @ torch.ones(16, 4, dtype=torch.float64, device=t.device), xj, 1 << 18, 1e-12)

# k. a np.memmap file on disk (1 GiB) and a read-only array
tmp = tempfile.mkdtemp(dir="/tmp")
path = os.path.join(tmp, "x.npy")
mm = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(1 << 20, 256))
mm[:] = np.random.default_rng(7).standard_normal((1 << 20, 256), dtype=np.float32)
mm.flush(); del mm
xk = np.load(path, mmap_mode="r")
case("k1. np.load(mmap_mode='r') 1 GiB", lambda t: mlp(t), xk, 16384, 1e-4)
xro = np.frombuffer(xc.tobytes(), dtype=np.float32).reshape(xc.shape)
case("k2. read-only np.frombuffer", lambda t: mlp(t), xro, 16384, 1e-4)

# l. run_batches without outs, lists of differing trailing shapes
def f_l(t):
    return t.float().mean(dim=1)
rng = np.random.default_rng(8)
xl = [rng.standard_normal((int(rng.integers(1, 300)), int(rng.choice([16, 64, 128])), 32)).astype(np.float32) for _ in range(50)]
try:
    with fp.StreamPipeline(f_l) as p:
        for r in range(3):
            ys, t = timed(lambda: p.run_batches(xl))
        errs = [rel_err(y, x.mean(axis=1)) for y, x in zip(ys, xl)]
        print(f"RESULT l. run_batches 50 mixed (B,L,32) no outs: max err {max(errs):.2e} {'OK' if max(errs) < 1e-5 else 'WRONG'} "
              f"out {type(ys).__name__}/{type(ys[0]).__name__} last {t:.1f} ms", flush=True)
except Exception as e:  # noqa: BLE001
    traceback.print_exc(); print(f"RESULT l. RAISED {type(e).__name__}: {str(e)[:400]}", flush=True)

# m. the empty input and one row
for name, xm in (("m1. zero rows", xc[:0]), ("m2. one row", xc[:1])):
    try:
        with fp.StreamPipeline(lambda t: mlp(t)) as p:
            y = p.run(xm)
        print(f"RESULT {name}: shape {np.asarray(y).shape} err {rel_err(y, naive_loop(lambda t: mlp(t), xm, 16) if len(xm) else np.zeros((0, 256), np.float32)) if len(xm) else 0:.2e}", flush=True)
    except Exception as e:  # noqa: BLE001
        traceback.print_exc(); print(f"RESULT {name} RAISED {type(e).__name__}: {str(e)[:400]}", flush=True)

# n. 4 threads, each its own pipeline over its own torch model, at once
def worker(i, out):
    try:
        m = torch.nn.Linear(256, 256).to(dev).eval()
        xi = np.random.default_rng(100 + i).standard_normal((65536, 256)).astype(np.float32)
        with torch.inference_mode(), fp.StreamPipeline(lambda t: m(t)) as p:
            for _ in range(3):
                y = p.run(xi)
            ref = naive_loop(lambda t: m(t), xi, 8192)
            out[i] = rel_err(y, ref)
    except Exception as e:  # noqa: BLE001
        out[i] = f"{type(e).__name__}: {e}"
res = {}
th = [threading.Thread(target=worker, args=(i, res)) for i in range(4)]
[t.start() for t in th]; [t.join() for t in th]
print(f"RESULT n. 4 threads own pipelines: {res}", flush=True)
