"""p289: fullpipe's defaults on models not in its tests or benchmark, as a new user would run them.
Each: the outputs checked against the naive loop, then medians of 5 timed runs (after 2 warm ones) of
fullpipe with defaults (StreamPipeline(f)), the naive loop, and compute alone on device-resident
batches (the same batches, one stream; for run() at 256 rows and at fullpipe's chunk, the faster).
Prints what fullpipe chose (chunk, list path, threads) and the ratio against compute alone."""
import statistics, sys, time
import numpy as np
import torch
import fullpipe as fp

torch.manual_seed(289)
rng = np.random.default_rng(289)
dev = torch.device("cuda")
ONLY = sys.argv[1:]


def med_ms(fn, repeat=5, warm=2):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(repeat):
        t = time.perf_counter(); fn(); torch.cuda.synchronize(); ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)


def alone_ms(f, xs):
    dx = [x.to(dev) for x in xs]
    s = torch.cuda.Stream()

    def run():
        with torch.cuda.stream(s):
            for x in dx:
                f(x)
        s.synchronize()
    return med_ms(run)


def naive(f, xs):
    return [f(x.to(dev)).cpu() for x in xs]


def close(a, b, tol):
    a, b = a.float(), b.float()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item() < tol


def trial(name, f, x=None, xs=None, tol=2e-2):
    if ONLY and name not in ONLY:
        return
    print(f"\n== {name}", flush=True)
    t0 = time.perf_counter()
    with torch.inference_mode(), fp.StreamPipeline(f) as pipe:
        if x is not None:
            ref = torch.cat(naive(f, list(x.split(256))))
            y = pipe.run(x)
            first_s = time.perf_counter() - t0
            ok = close(y, ref, tol)
            fp_ms = med_ms(lambda: pipe.run(x))
            rows = (pipe.stats.chunk or {}).get("rows") or 256
            al = min(alone_ms(f, list(x.split(256))), alone_ms(f, list(x.split(int(rows)))))
            nv = med_ms(lambda: naive(f, list(x.split(256))), repeat=3, warm=1)
        else:
            ref = naive(f, xs)
            ys = pipe.run_batches(xs)
            first_s = time.perf_counter() - t0
            ok = all(close(a, b, tol) for a, b in zip(ys, ref))
            fp_ms = med_ms(lambda: pipe.run_batches(xs), warm=12)  # (past the list trial)
            al = alone_ms(f, xs)
            nv = med_ms(lambda: naive(f, xs), repeat=3, warm=1)
        st = pipe.stats
        ch = st.chunk or {}
        print(f"   correct={ok}; first run {first_s:.2f} s; staging {st.staging}; chunk {ch.get('rows')} rows "
              f"({ch.get('source')}); list_path {(st.list_path or {}).get('path')}; threads "
              f"{(st.compute_threads or {}).get('threads')}; enqueue {st.enqueue_us_per_batch:.0f} us/batch; "
              f"host {dict((k, round(v, 1)) for k, v in st.host_us.items())}", flush=True)
        print(f"RESULT {name:28s} fullpipe {fp_ms:9.2f} ms | alone {al:9.2f} | naive {nv:9.2f} | "
              f"x alone {al / fp_ms:5.3f} | x naive {nv / fp_ms:5.2f} | correct {ok}", flush=True)


# 1. a 6-layer transformer encoder (d 512, 8 heads), fp16, batches of random sizes and lengths
enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True, dropout=0.0),
                                  6, enable_nested_tensor=False).to(dev).half().eval()
emb = torch.nn.Embedding(32000, 512).to(dev).half()


def encode(ids):  # (B, L) int64 -> (B, 512) float32 mean-pooled
    return enc(emb(ids)).float().mean(1)


xs = [torch.randint(0, 32000, (int(rng.integers(4, 65)), int(rng.integers(32, 257)))) for _ in range(64)]
trial("encoder6-list64", encode, xs=xs)

# 2. a 2-layer GRU over sequences of random lengths (fp32 features in, last hidden out)
gru = torch.nn.GRU(128, 512, 2, batch_first=True).to(dev).eval()


def gru_last(x):  # (B, T, 128) float32 -> (B, 512)
    return gru(x)[1][-1]


xs = [torch.randn(int(rng.integers(16, 129)), int(rng.integers(20, 200)), 128) for _ in range(48)]
trial("gru2-list48", gru_last, xs=xs, tol=1e-3)

# 3. a torchvision ViT-B/16, fp16, over pageable uint8 images (compute-bound)
try:
    import torchvision
    vit = torchvision.models.vit_b_16().to(dev).half().eval()
    mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1) * 255

    def classify(img):  # (N, 224, 224, 3) uint8 -> (N, 1000) float32
        return vit(((img.permute(0, 3, 1, 2).float() - mean) / std).half()).float()

    imgs = torch.randint(0, 256, (2048, 224, 224, 3), dtype=torch.uint8)
    trial("vit_b_16-2048img", classify, x=imgs, tol=3e-2)

    # 4. a small convnet with little compute per byte (resnet18 at 112 px) over 8192 images
    r18 = torchvision.models.resnet18().to(dev).half().to(memory_format=torch.channels_last).eval()

    def r18f(img):
        return r18(((img.permute(0, 3, 1, 2).float() - mean) / std).half()).float()

    imgs = torch.randint(0, 256, (8192, 112, 112, 3), dtype=torch.uint8)
    trial("resnet18-112px-8192img", r18f, x=imgs, tol=3e-2)
except ImportError as e:
    print("torchvision missing:", e)

# 5. a 1-D conv stack over float32 audio frames, 1 GiB pageable in, a quarter out (copy-heavy)
conv = torch.nn.Sequential(torch.nn.Conv1d(1, 32, 9, padding=4), torch.nn.GELU(), torch.nn.Conv1d(32, 8, 9, padding=4),
                           torch.nn.GELU(), torch.nn.Conv1d(8, 1, 9, padding=4, stride=4)).to(dev).half().eval()


def audio(x):  # (N, 16384) float32 -> (N, 4096) float32
    return conv(x.half().unsqueeze(1)).squeeze(1).float()


frames = torch.randn(16384, 16384)
trial("conv1d-audio-1GiB", audio, x=frames, tol=3e-2)
