"""Session 33: long lists of small batches, the measured choice (list_paths.py) against each
way forced, the naive loop and compute alone (one stream, device-resident). Workloads of
p225 plus three not in any test. Alternating rounds (order rotated), medians; us per batch."""
import random, statistics, sys, time
import numpy as np, torch
import fullpipe as fp
from fullpipe.pipeline.list_paths import PIPELINED, PLAIN

torch.backends.cudnn.benchmark = False
tdev = torch.device("cuda")
with torch.device("cuda"):
    mlp = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).eval()
    emb = torch.nn.Embedding(32000, 1024, dtype=torch.bfloat16).eval()
    layer = torch.nn.TransformerEncoderLayer(1024, 16, 4096, dropout=0.0, activation="gelu", batch_first=True,
                                             dtype=torch.bfloat16).eval()
    gru_emb = torch.nn.Embedding(8000, 256).eval()
    gru = torch.nn.GRU(256, 512, num_layers=2, batch_first=True).eval()
    cnn = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(64, 128, 3, stride=2, padding=1),
                              torch.nn.ReLU(), torch.nn.Conv2d(128, 256, 3, stride=2, padding=1), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(256, 10)
                              ).to(memory_format=torch.channels_last, dtype=torch.float16).eval()
    big_mlp = torch.nn.Sequential(torch.nn.Linear(1024, 8192), torch.nn.GELU(), torch.nn.Linear(8192, 1024)).to(torch.bfloat16).eval()


def double(x):
    return x * 2


def tiny_f(x):
    with torch.inference_mode():
        return mlp(x)


def enc(ids):
    with torch.inference_mode():
        return layer(emb(ids)).float().mean(dim=1)


def gru_f(ids):  # token ids (B, L) int64 -> last hidden state (B, 512)
    with torch.inference_mode():
        out, h = gru(gru_emb(ids))
        return h[-1]


def cnn_f(img):  # (B, 32, 32, 3) uint8 -> (B, 10) float32 logits
    with torch.inference_mode():
        x = img.permute(0, 3, 1, 2).to(torch.float16).div_(255)
        return cnn(x).float()


def big_f(x):  # 64-256 rows of 1024 float32 through a bf16 MLP 1024-8192-1024: GPU-heavy per batch
    with torch.inference_mode():
        return big_mlp(x.to(torch.bfloat16)).float()


rnd = random.Random(14); g = torch.Generator().manual_seed(0); bx = []; tok = 0
while tok < 1 << 20:
    seq = rnd.choice((64, 128, 256, 512)); b = max(1, rnd.randint(2048, 16384) // seq)
    bx.append(torch.randint(0, 32000, (b, seq), dtype=torch.int32, generator=g)); tok += b * seq
r = np.random.default_rng(1)
cases = {
    "x*2, 400 x 32x512 f32": (double, [torch.randn(32, 512) for _ in range(400)]),
    "x*2 pinned, 400 x 32x512": (double, [torch.randn(32, 512).pin_memory() for _ in range(400)]),
    "MLP, 300 x 4-32 rows": (tiny_f, [torch.randn(int(n), 512) for n in r.integers(4, 33, 300)]),
    "encoder, 127 batches": (enc, bx),
    "GRU 2x512, 200 x 8-32 seqs of 64 ids": (gru_f, [torch.randint(0, 8000, (int(n), 64)) for n in r.integers(8, 33, 200)]),
    "CNN fp16, 150 x 64 uint8 32x32 (numpy)": (cnn_f, [r.integers(0, 256, (64, 32, 32, 3), dtype=np.uint8) for _ in range(150)]),
    "big MLP bf16, 90 x 64-256 rows": (big_f, [torch.randn(int(n), 1024) for n in r.integers(64, 257, 90)]),
}
only = sys.argv[1:]


def as_t(x):
    return x if isinstance(x, torch.Tensor) else torch.from_numpy(x)


def naive(f, xs):
    for x in xs:
        f(as_t(x).to(tdev)).cpu()


rows = []
for name, (f, xs) in cases.items():
    if only and not any(o in name for o in only):
        continue
    dev = [as_t(x).to(tdev) for x in xs]
    ref = [f(x).cpu() for x in dev]
    torch.cuda.synchronize()
    auto, pp, pl = fp.StreamPipeline(f), fp.StreamPipeline(f), fp.StreamPipeline(f)
    pp._list_paths.next_path = lambda key: PIPELINED
    pl._list_paths.next_path = lambda key: PLAIN
    curves = {}
    for label, p in (("auto", auto), ("pipelined", pp), ("plain", pl)):
        curve = []
        for _ in range(8):  # the first run makes the adapter; auto's trial is runs 2-7
            t0 = time.perf_counter()
            got = p.run_batches(xs)
            us = (time.perf_counter() - t0) * 1e6 / len(xs)
            st = p.stats
            curve.append(f"{us:.0f}{'L' if st.staging.get('input') == 'plain' else 'P'}"
                         f"{'+%.0fMiB' % (st.pinned.get('allocated_bytes', 0) / 2**20) if st.pinned.get('allocated_bytes') else ''}")
            err = max(float((as_t(a).float() - b.float()).abs().max()) for a, b in zip(got, ref))
            assert err <= 1e-3, (name, err)
        curves[label] = " ".join(curve)
    lp = auto.stats.list_path
    trial = {k: v for k, v in (lp or {}).items()}

    def alone(dev=dev, f=f):
        for x in dev:
            f(x)
        torch.cuda.synchronize()
    cont = {"alone (1 stream)": alone, "naive": lambda: naive(f, xs), "auto": lambda: auto.run_batches(xs),
            "pipelined": lambda: pp.run_batches(xs), "plain": lambda: pl.run_batches(xs)}
    t = {k: [] for k in cont}
    names = list(cont)
    for rd in range(11):
        order = names[rd % len(names):] + names[:rd % len(names)]
        for k in order:
            torch.cuda.synchronize()
            t0 = time.perf_counter(); cont[k](); t[k].append((time.perf_counter() - t0) * 1e6 / len(xs))
    med = {k: statistics.median(v) for k, v in t.items()}
    mb = sum(as_t(x).nbytes for x in xs) / len(xs) / 1024
    print(f"\n{name}: {len(xs)} batches, {mb:.0f} KiB a batch; auto: {trial}", flush=True)
    for label, c in curves.items():
        print(f"  first runs, {label}: {c}")
    for k in names:
        print(f"  {k:18s} {med[k]:8.1f} us/batch  x naive {med['naive'] / med[k]:.2f}  x alone {med['alone (1 stream)'] / med[k]:.2f}"
              f"   rounds: {' '.join(f'{v:.0f}' for v in t[k])}", flush=True)
    rows.append((name, med, trial.get("path")))
    for p in (auto, pp, pl):
        p.close()
print("\n| workload | alone | naive | auto (chose) | pipelined | plain | auto x naive | auto x best of the two |")
for name, m, path in rows:
    print(f"| {name} | {m['alone (1 stream)']:.1f} | {m['naive']:.1f} | {m['auto']:.1f} ({path}) | {m['pipelined']:.1f} | "
          f"{m['plain']:.1f} | {m['naive'] / m['auto']:.2f} | {min(m['pipelined'], m['plain']) / m['auto']:.2f} |")
