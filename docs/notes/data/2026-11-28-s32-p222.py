"""Session 32: where fullpipe's per-batch host time goes, by sampling (py-spy runs this
script; argv[1] picks the workload, argv[2] the seconds to loop). Also, once, the floor:
a lean hand loop that does only what a batch needs (inputs on the GPU in one copy, a view
per batch, the call on 3 streams in turn, one D2H per output into one pinned block, one
sync at the end), against fullpipe and alone, in alternating rounds."""
import statistics, sys, time
import numpy as np, torch
import fullpipe as fp

tdev = torch.device("cuda")
which, seconds = sys.argv[1], float(sys.argv[2])
with torch.device("cuda"):
    mlp = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).eval()
if which == "tiny":
    def f(x):
        with torch.inference_mode():
            return mlp(x)
    xs = [torch.randn(int(r), 512) for r in np.random.default_rng(1).integers(4, 33, 300)]
elif which == "double":
    def f(x):
        return x * 2
    xs = [torch.randn(32, 512) for _ in range(400)]
else:
    VOCAB, D, H, FF = 32000, 1024, 16, 4096
    import random
    with torch.device("cuda"):
        emb = torch.nn.Embedding(VOCAB, D, dtype=torch.bfloat16).eval()
        layer = torch.nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, activation="gelu", batch_first=True,
                                                 dtype=torch.bfloat16).eval()

    def f(ids):
        with torch.inference_mode():
            return layer(emb(ids)).float().mean(dim=1)
    rnd = random.Random(14); g = torch.Generator().manual_seed(0); xs = []; tok = 0
    while tok < 1 << 20:
        seq = rnd.choice((64, 128, 256, 512)); b = max(1, rnd.randint(2048, 16384) // seq)
        xs.append(torch.randint(0, VOCAB, (b, seq), dtype=torch.int32, generator=g)); tok += b * seq

s3 = [torch.cuda.Stream() for _ in range(3)]
default = torch.cuda.default_stream()
dev = [x.to(tdev) for x in xs]


def alone():
    for i, x in enumerate(dev):
        torch.cuda.set_stream(s3[i % 3])
        f(x)
    torch.cuda.set_stream(default)
    torch.cuda.synchronize()


def lean(xs):
    """The floor: what a batch needs and nothing else."""
    n = [x.numel() for x in xs]
    offs = np.concatenate([[0], np.cumsum(n)])
    host = torch.empty(int(offs[-1]), dtype=xs[0].dtype, pin_memory=True)
    for x, a in zip(xs, offs[:-1]):
        host[a:a + x.numel()].copy_(x.view(-1))
    block = host.to(tdev, non_blocking=True)
    ys, outs = [], []
    for i, x in enumerate(xs):
        torch.cuda.set_stream(s3[i % 3])
        xt = block.as_strided(x.shape, x.stride(), int(offs[i]))
        y = f(xt)
        ys.append(y.to("cpu", non_blocking=True))
    torch.cuda.set_stream(default)
    torch.cuda.synchronize()
    return ys


pipe = fp.StreamPipeline(f)
ref = [f(x).cpu() for x in dev]
got = pipe.run_batches(xs)
print("max error", max(float((g.float() - r.float()).abs().max()) for g, r in zip(got, ref)), flush=True)
if seconds == 0:  # the comparison, once
    V = {"alone (3 streams)": alone, "lean loop": lambda: lean(xs), "fullpipe": lambda: pipe.run_batches(xs),
         "naive": lambda: [f(x.to(tdev)).cpu() for x in xs]}
    for fn in V.values():
        fn(); fn()
    res = {k: [] for k in V}; items = list(V.items())
    for r in range(12):
        for k, fn in items[r % len(items):] + items[:r % len(items)]:
            torch.cuda.synchronize()
            t0 = time.perf_counter(); fn(); res[k].append((time.perf_counter() - t0) * 1e3)
    a = statistics.median(res["alone (3 streams)"])
    for k, v in res.items():
        m = statistics.median(v)
        print(f"  {which:7s} {k:20s} {m:7.2f} ms  {a / m:4.2f}x alone  {m / len(xs) * 1e3:6.1f} us/batch  "
              f"{[round(x, 1) for x in v]}")
    print(pipe.stats)
else:
    t_end = time.perf_counter() + seconds
    runs = 0
    while time.perf_counter() < t_end:
        pipe.run_batches(xs); runs += 1
    print(f"{which}: {runs} runs, {(seconds / runs) * 1e3:.2f} ms per run; host_us {pipe.stats.host_us}")
