"""A new user's second wave (none in the tests): each case prints one line; failures print the
exception and go on."""
import time, traceback, warnings, sys
import numpy as np, torch, torchvision
import fullpipe as fp
torch.manual_seed(0)

def case(name, fn):
    print(f"--- {name}", flush=True)
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            line = fn()
            msgs = sorted({str(x.message)[:200] for x in w})
        print(f"{name:40s} {line}")
        for m in msgs: print("   warning:", m)
    except Exception as exc:
        print(f"{name:40s} RAISED {type(exc).__name__}: {str(exc)[:400]}")

def maxerr(got, ref):
    return max(float(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)).max()) for a, b in zip(got, ref))

# 1. torch.compile (default mode) MLP over batches of variable sizes: first and second run
def compiled():
    mlp = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 64)).cuda().eval()
    cm = torch.compile(mlp)
    rng = np.random.default_rng(1)
    xs = [rng.random((int(n), 256), dtype=np.float32) for n in rng.integers(100, 4000, size=40)]
    @torch.inference_mode()
    def f(x): return cm(x)
    pipe = fp.StreamPipeline(f)
    t0 = time.perf_counter(); ys = pipe.run_batches(xs); t1 = time.perf_counter()
    ys2 = pipe.run_batches(xs); t2 = time.perf_counter()
    with torch.inference_mode(): ref = [mlp(torch.from_numpy(x).cuda()).cpu().numpy() for x in xs]
    t3 = time.perf_counter()
    with torch.inference_mode(): [f(torch.from_numpy(x).cuda()).cpu().numpy() for x in xs]
    t4 = time.perf_counter()
    return (f"err {maxerr(ys, ref):.2e}/{maxerr(ys2, ref):.2e} first {1e3*(t1-t0):.0f} ms second {1e3*(t2-t1):.1f} ms "
            f"naive(compiled) {1e3*(t4-t3):.1f} ms padded {pipe.stats.padded} serial {pipe.stats.compute_serial}")

# 2. cudnn.benchmark resnet18 fp16 over image batches of all different sizes (each a new shape)
def benchmark_mode():
    torch.backends.cudnn.benchmark = True
    m = torchvision.models.resnet18().cuda().half().to(memory_format=torch.channels_last).eval()
    sizes = [48, 30, 40, 22, 36, 26, 44, 33, 20, 46]
    rng = np.random.default_rng(2)
    xs = [rng.integers(0, 255, (n, 3, 128, 128), dtype=np.uint8) for n in sizes]
    @torch.inference_mode()
    def f(u8): return m((u8.half() / 255).contiguous(memory_format=torch.channels_last)).float()
    pipe = fp.StreamPipeline(f)
    t0 = time.perf_counter(); ys = pipe.run_batches(xs); torch.cuda.synchronize(); t1 = time.perf_counter()
    pad1 = pipe.stats.padded
    ys2 = pipe.run_batches(xs); t2 = time.perf_counter()
    with torch.inference_mode(): ref = [f(torch.from_numpy(x).cuda()).cpu().numpy() for x in xs]
    t3 = time.perf_counter()
    with torch.inference_mode(): [f(torch.from_numpy(x).cuda()).cpu().numpy() for x in xs]
    t4 = time.perf_counter()
    torch.backends.cudnn.benchmark = False
    return (f"err {maxerr(ys, ref):.2e} first {1e3*(t1-t0):.0f} ms (padded {pad1}) second {1e3*(t2-t1):.1f} ms "
            f"naive, shapes seen {1e3*(t4-t3):.1f} ms")

# 3. dtypes and shapes: float16, bool, 1-D rows of scalars, a transposed torch CPU tensor
def dtypes():
    out = []
    x16 = np.random.default_rng(3).random((50000, 64)).astype(np.float16)
    y = fp.StreamPipeline(lambda t: t * 2).run(x16)
    out.append(f"f16 {y.dtype} ok={np.array_equal(y, x16 * 2)}")
    xb = np.random.default_rng(4).random((100000, 8)) > 0.5
    y = fp.StreamPipeline(lambda t: t.sum(dim=1, dtype=torch.int32)).run(xb)
    out.append(f"bool->{y.dtype} ok={np.array_equal(y, xb.sum(1))}")
    x1 = np.arange(1_000_000, dtype=np.float32)
    y = fp.StreamPipeline(lambda t: t.double() + 1).run(x1)
    out.append(f"1-D {y.shape} {y.dtype} ok={np.array_equal(y, x1 + 1)}")
    xt = torch.randn(64, 200000).T  # non-contiguous CPU view
    y = fp.StreamPipeline(lambda t: t * 3).run(xt)
    out.append(f"transposed {type(y).__name__} {tuple(y.shape)} ok={torch.allclose(y, xt * 3)}")
    return "; ".join(out)

# 4. errors: a tuple returned, a failing batch then reuse, out= of the wrong dtype
def errors():
    out = []
    x = np.random.default_rng(5).random((200000, 16), dtype=np.float32)
    try:
        fp.StreamPipeline(lambda t: (t, t)).run(x)
    except Exception as e:
        out.append(f"tuple: {type(e).__name__}: {str(e)[:140]}")
    calls = [0]
    def bad(t):
        calls[0] += 1
        if calls[0] == 5: raise RuntimeError("boom at batch 5")
        return t + 1
    pipe = fp.StreamPipeline(bad, chunk=10000)
    try:
        pipe.run(x)
    except RuntimeError as e:
        out.append(f"raise: {str(e)[:40]}")
    y = pipe.run(x)
    out.append(f"reuse ok={np.allclose(y, x + 1)}")
    try:
        fp.StreamPipeline(lambda t: t + 1).run(x, out=np.empty(x.shape, np.float64))
    except Exception as e:
        out.append(f"out dtype: {type(e).__name__}: {str(e)[:140]}")
    return " | ".join(out)

# 5. imap over a generator of variable-size batches (cudnn.benchmark conv1d)
def imap_gen():
    torch.backends.cudnn.benchmark = True
    conv = torch.nn.Conv1d(32, 64, 9, padding=4).cuda().half().eval()
    rng = np.random.default_rng(6)
    sizes = [int(n) for n in rng.integers(16, 200, size=30)]
    def gen():
        for n in sizes:
            yield np.random.default_rng(n).random((n, 32, 512), dtype=np.float32)
    @torch.inference_mode()
    def f(x): return conv(x.half()).float()
    pipe = fp.StreamPipeline(f)
    t0 = time.perf_counter(); got = list(pipe.imap(gen())); t1 = time.perf_counter()
    with torch.inference_mode(): ref = [f(torch.from_numpy(x).cuda()).cpu().numpy() for x in gen()]
    torch.backends.cudnn.benchmark = False
    return f"err {maxerr(got, ref):.2e} n={len(got)} {1e3*(t1-t0):.0f} ms padded {pipe.stats.padded}"

for name, fn in [("torch.compile MLP, 40 variable batches", compiled), ("cudnn.benchmark resnet18, all-new sizes", benchmark_mode),
                 ("dtypes and shapes", dtypes), ("errors", errors), ("imap generator, cudnn.benchmark", imap_gen)]:
    case(name, fn)
