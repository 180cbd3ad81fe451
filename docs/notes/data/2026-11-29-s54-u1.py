"""u1: fullpipe used as a new user would, on workloads in no test (defaults), each against the naive loop and compute
alone on device-resident batches (alternating rounds, medians), outputs checked against the naive loop's."""
import statistics, sys, time, traceback, threading
import numpy as np
import torch
import fullpipe as fp

dev = torch.device("cuda")
torch.manual_seed(0)
rng = np.random.default_rng(0)
stream = torch.cuda.Stream()


def med_rounds(contenders, k=7):
    ts = {n: [] for n, _ in contenders}
    for _ in range(k):
        for n, fn in contenders:
            torch.cuda.synchronize(); t = time.perf_counter(); fn(); torch.cuda.synchronize()
            ts[n].append((time.perf_counter() - t) * 1e3)
    return {n: statistics.median(v) for n, v in ts.items()}


def alone_fn(f, xs_dev):
    def run():
        with torch.cuda.stream(stream):
            for x in xs_dev:
                f(x)
        stream.synchronize()
    return run


def rel_err(a, b):
    a = torch.as_tensor(np.asarray(a), dtype=torch.float32); b = torch.as_tensor(np.asarray(b), dtype=torch.float32)
    return float((a - b).norm() / max(b.norm(), 1e-30))


def trial(name, fn):
    print(f"== {name}", flush=True)
    t = time.perf_counter()
    try:
        fn()
    except Exception:
        traceback.print_exc()
        print(f"RESULT {name}: FAILED", flush=True)
    print(f"   ({time.perf_counter() - t:.1f} s)", flush=True)


# A: a numpy list of variable-row float32 feature batches through a bf16 MLP, fresh outputs
def a():
    mlp = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.SiLU(), torch.nn.Linear(2048, 2048), torch.nn.SiLU(),
                              torch.nn.Linear(2048, 256)).to(dev, torch.bfloat16).eval()

    @torch.inference_mode()
    def f(x):
        return mlp(x.to(torch.bfloat16)).float()
    xs = [rng.standard_normal((int(r), 512), dtype=np.float32) for r in rng.integers(64, 2048, 200)]
    naive = lambda: [f(torch.from_numpy(x).to(dev)).cpu().numpy() for x in xs]
    ref = naive()
    with fp.StreamPipeline(f) as pipe:
        got = pipe.run_batches(xs)
        err = max(rel_err(g, r) for g, r in zip(got, ref))
        assert all(isinstance(g, np.ndarray) and g.shape == r.shape for g, r in zip(got, ref)), "kinds/shapes"
        for _ in range(12):
            pipe.run_batches(xs)
        xs_dev = [torch.from_numpy(x).to(dev) for x in xs]
        m = med_rounds([("alone", alone_fn(f, xs_dev)), ("naive", naive), ("fullpipe", lambda: pipe.run_batches(xs))])
        st = pipe.stats
    print(f"RESULT A numpy list 200 x (64-2048, 512) f32 -> bf16 MLP: err {err:.2e}; alone {m['alone']:.2f} naive "
          f"{m['naive']:.2f} fullpipe {m['fullpipe']:.2f} ms: {m['alone'] / m['fullpipe']:.3f}x alone, "
          f"{m['naive'] / m['fullpipe']:.2f}x naive; staging {st.staging} path {(st.list_path or {}).get('path')}"
          f" pinned {st.pinned}", flush=True)


# B: a pinned torch uint8 image tensor through resnet34 (fp16, channels_last) with run(); pinned bytes per run
def b():
    import torchvision
    net = torchvision.models.resnet34().to(dev, torch.float16).to(memory_format=torch.channels_last).eval()
    mean = torch.tensor([0.485, 0.456, 0.406], device=dev, dtype=torch.float16).view(1, 3, 1, 1) * 255

    @torch.inference_mode()
    def f(t):  # (N, H, W, 3) uint8
        x = t.permute(0, 3, 1, 2).to(torch.float16) - mean
        return net(x).float()
    imgs = torch.randint(0, 256, (2048, 160, 160, 3), dtype=torch.uint8).pin_memory()
    ref = torch.cat([f(c.to(dev)).cpu() for c in imgs.split(256)])
    with fp.StreamPipeline(f) as pipe:
        y = pipe.run(imgs)
        err = rel_err(y, ref)
        assert isinstance(y, torch.Tensor), type(y)
        y2 = pipe.run(imgs)
        pinned2 = pipe.stats.pinned
        y3 = pipe.run(imgs)
        pinned3 = pipe.stats.pinned
        rows = (pipe.stats.chunk or {}).get("rows")
        xs_dev = [c.to(dev) for c in imgs.split(int(rows))]
        chunks256 = [c.to(dev) for c in imgs.split(256)]
        naive = lambda: torch.cat([f(c.to(dev)).cpu() for c in imgs.split(256)])
        m = med_rounds([("alone", alone_fn(f, xs_dev)), ("alone256", alone_fn(f, chunks256)), ("naive", naive),
                        ("fullpipe", lambda: pipe.run(imgs))], k=5)
        st = pipe.stats
    bound = min(m["alone"], m["alone256"])
    print(f"RESULT B pinned uint8 2048x160x160x3 -> resnet34 fp16: err {err:.2e}; chunk {rows} rows; alone {bound:.2f} "
          f"naive {m['naive']:.2f} fullpipe {m['fullpipe']:.2f} ms: {bound / m['fullpipe']:.3f}x alone, "
          f"{m['naive'] / m['fullpipe']:.2f}x naive; y is {type(y).__name__} pinned={y.is_pinned()}; pinned run2 {pinned2} "
          f"run3 {pinned3}", flush=True)


# C: 4000 tiny batches (16 rows x 256 f32) through a Linear, fresh outputs
def c():
    lin = torch.nn.Linear(256, 256).to(dev).eval()

    @torch.inference_mode()
    def f(x):
        return lin(x)
    xs = [torch.randn(16, 256) for _ in range(4000)]
    naive = lambda: [f(x.to(dev)).cpu() for x in xs]
    ref = naive()
    with fp.StreamPipeline(f) as pipe:
        got = pipe.run_batches(xs)
        err = max(rel_err(g, r) for g, r in zip(got, ref))
        for _ in range(10):
            pipe.run_batches(xs)
        xs_dev = [x.to(dev) for x in xs]
        m = med_rounds([("alone", alone_fn(f, xs_dev)), ("naive", naive), ("fullpipe", lambda: pipe.run_batches(xs))],
                       k=5)
        st = pipe.stats
    print(f"RESULT C 4000 tiny torch batches -> Linear: err {err:.2e}; alone {m['alone']:.2f} naive {m['naive']:.2f} "
          f"fullpipe {m['fullpipe']:.2f} ms: {m['alone'] / m['fullpipe']:.3f}x alone, {m['naive'] / m['fullpipe']:.2f}x "
          f"naive; staging {st.staging} path {(st.list_path or {}).get('path')}", flush=True)


# D: CuPy function over a 512 MiB pageable float64 array
def d():
    import cupy
    x = rng.standard_normal(64 * 1024 * 1024)
    g = lambda a: cupy.sqrt(cupy.abs(a)) * 2.0 + 1.0
    ref = np.sqrt(np.abs(x)) * 2.0 + 1.0
    with fp.StreamPipeline(g, form="cupy") as pipe:
        y = pipe.run(x)
        err = float(np.abs(y - ref).max())
        for _ in range(3):
            pipe.run(x)
        ts = []
        for _ in range(5):
            t = time.perf_counter(); pipe.run(x); ts.append((time.perf_counter() - t) * 1e3)
        st = pipe.stats
    def naive():
        out = np.empty_like(x)
        for i in range(0, x.size, 8 * 1024 * 1024):
            out[i:i + 8 * 1024 * 1024] = cupy.asnumpy(g(cupy.asarray(x[i:i + 8 * 1024 * 1024])))
        return out
    tn = []
    for _ in range(3):
        t = time.perf_counter(); naive(); tn.append((time.perf_counter() - t) * 1e3)
    fpms = statistics.median(ts)
    print(f"RESULT D cupy over 512 MiB f64: max err {err:.1e}; fullpipe {fpms:.1f} ms ({x.nbytes / fpms / 1e6:.1f} GB/s "
          f"each way), naive 64 MiB chunks {statistics.median(tn):.1f} ms: {statistics.median(tn) / fpms:.2f}x; "
          f"staging {st.staging}", flush=True)


# E: 8 threads, each its own pipeline over its own list, one shared pool
def e():
    pool = fp.DevicePool(fp.Device(), release_threshold="max")
    lin = torch.nn.Linear(128, 64).to(dev).eval()

    @torch.inference_mode()
    def f(x):
        return torch.relu(lin(x))
    errs, fails = [], []
    def worker(k):
        try:
            xs = [torch.randn(int(r), 128) for r in np.random.default_rng(k).integers(1, 3000, 40)]
            with fp.StreamPipeline(f, pool=pool) as pipe:
                for _ in range(5):
                    got = pipe.run_batches(xs)
            with torch.inference_mode():
                ref = [f(x.to(dev)).cpu() for x in xs]
            errs.append(max(rel_err(g, r) for g, r in zip(got, ref)))
        except Exception as exc:
            fails.append(repr(exc))
    ths = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    [t.start() for t in ths]; [t.join() for t in ths]
    print(f"RESULT E 8 threads: fails {fails[:2]} max err {max(errs) if errs else None}; pool {pool.stats()}", flush=True)


for name, fn in [("A", a), ("B", b), ("C", c), ("D", d), ("E", e)]:
    trial(name, fn)
