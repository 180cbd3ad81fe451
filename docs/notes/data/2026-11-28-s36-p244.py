"""Session 36: compute_threads="auto" and the list paths on lists of model classes in no test
and no earlier probe (p238's were encoders, an MLP, a GRU, a chain, torch.compile): a
resnet18 over lists of 1-16 images (cuDNN convolutions: per-thread plans), a Conv1d audio
encoder over variable clips, a small 4-layer d256 encoder (host-bound, many small
operators), a d4096 MLP (GPU-bound), an LSTM. With the defaults against each way forced,
the naive loop and compute alone. Alternating rounds, medians; us per batch. (The
measurement part is p238's.)"""
import statistics, sys, time, warnings
import numpy as np, torch, torchvision
import fullpipe as fp
from fullpipe.pipeline.list_paths import PIPELINED, PLAIN

torch.backends.cudnn.benchmark = False
tdev = torch.device("cuda")
with torch.device("cuda"):
    r18 = torchvision.models.resnet18().to(memory_format=torch.channels_last).half().eval()
    audio = torch.nn.Sequential(torch.nn.Conv1d(1, 64, 400, stride=160), torch.nn.GELU(),
                                torch.nn.Conv1d(64, 128, 5, stride=2), torch.nn.GELU(),
                                torch.nn.Conv1d(128, 256, 3, stride=2), torch.nn.GELU()).eval()
    emb = torch.nn.Embedding(8000, 256).eval()
    enc4 = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True),
                                       4, enable_nested_tensor=False).eval()
    big = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 4096)
                              ).to(torch.bfloat16).eval()
    lstm = torch.nn.LSTM(128, 256, batch_first=True).eval()
mean = torch.tensor([0.485, 0.456, 0.406], device=tdev).view(1, 3, 1, 1) * 255
std = torch.tensor([0.229, 0.224, 0.225], device=tdev).view(1, 3, 1, 1) * 255


def r18_f(x):  # (B, 224, 224, 3) uint8 -> (B, 1000) float32
    with torch.inference_mode():
        h = ((x.permute(0, 3, 1, 2).float() - mean) / std).half().contiguous(memory_format=torch.channels_last)
        return r18(h).float()


def audio_f(x):  # (B, 16000) float32 -> (B, 256)
    with torch.inference_mode():
        return audio(x.unsqueeze(1)).mean(dim=2)


def enc4_f(ids):
    with torch.inference_mode():
        return enc4(emb(ids)).mean(dim=1)


def big_f(x):
    with torch.inference_mode():
        return big(x.to(torch.bfloat16)).float()


def lstm_f(x):
    with torch.inference_mode():
        out, (h, c) = lstm(x)
        return h[-1]


r = np.random.default_rng(36)
cases = {
    "resnet18 fp16, 150 x 1-16 images 224x224 uint8": (
        r18_f, [torch.randint(0, 256, (int(n), 224, 224, 3), dtype=torch.uint8) for n in r.integers(1, 17, 150)]),
    "Conv1d audio, 200 x 4-16 clips of 16000": (audio_f, [torch.randn(int(n), 16000) for n in r.integers(4, 17, 200)]),
    "encoder 4x d256, 200 x 8-64 x 128 ids": (
        enc4_f, [torch.randint(0, 8000, (int(n), 128)) for n in r.integers(8, 65, 200)]),
    "MLP d4096 bf16, 100 x 64-512 rows f32": (big_f, [torch.randn(int(n), 4096) for n in r.integers(64, 513, 100)]),
    "LSTM 128->256, 150 x 8-32 x 50 steps": (lstm_f, [torch.randn(int(n), 50, 128) for n in r.integers(8, 33, 150)]),
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
    t_case = time.perf_counter()
    dev = [as_t(x).to(tdev) for x in xs]
    ref = [f(x).cpu() for x in dev]
    torch.cuda.synchronize()
    auto, pp, pl = fp.StreamPipeline(f), fp.StreamPipeline(f), fp.StreamPipeline(f)
    th = fp.StreamPipeline(f, compute_threads=3) if name.find("reduce-overhead") < 0 else None
    pp._list_paths.next_path = lambda key, may_thread=False: PIPELINED
    pl._list_paths.next_path = lambda key, may_thread=False: (PIPELINED if key[0] == "larger batches" else PLAIN)
    curves = {}
    for label, p in (("auto", auto), ("pipelined", pp), ("plain", pl), ("threads", th)):
        if p is None:
            continue
        curve = []
        for _ in range(14 if p is auto else 4):  # the first run makes the adapter; auto's trial is runs 2-13
            t0 = time.perf_counter()
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always")
                got = p.run_batches(xs)
            us = (time.perf_counter() - t0) * 1e6 / len(xs)
            st = p.stats
            lp = st.list_path or {}
            curve.append(f"{us:.0f}{(lp.get('path') or 'x')[:2]}" + ("!W" if said else ""))
            for w in said:
                print(f"  WARNING {label}: {str(w.message)[:300]}")
            err = max(float((as_t(a).float() - b.float()).abs().max()) / max(1.0, float(b.float().abs().max()))
                      for a, b in zip(got, ref))
            if err > 2e-2:
                print(f"  WRONG {label}: relative error {err:.3g}", flush=True)
        curves[label] = " ".join(curve)
    lp = auto.stats.list_path
    trial = {k: v for k, v in (lp or {}).items()}

    def alone(dev=dev, f=f):
        for x in dev:
            f(x)
        torch.cuda.synchronize()
    cont = {"alone (1 stream)": alone, "naive": lambda: naive(f, xs), "auto": lambda: auto.run_batches(xs),
            "pipelined": lambda: pp.run_batches(xs), "plain": lambda: pl.run_batches(xs)}
    if th is not None:
        cont["threads"] = lambda: th.run_batches(xs)
    t = {k: [] for k in cont}
    names = list(cont)
    for rd in range(9):
        order = names[rd % len(names):] + names[:rd % len(names)]
        for k in order:
            torch.cuda.synchronize()
            t0 = time.perf_counter(); cont[k](); t[k].append((time.perf_counter() - t0) * 1e6 / len(xs))
    med = {k: statistics.median(v) for k, v in t.items()}
    mb = sum(as_t(x).nbytes for x in xs) / len(xs) / 1024
    print(f"\n{name}: {len(xs)} batches, {mb:.0f} KiB a batch ({time.perf_counter() - t_case:.0f} s); auto: {trial}", flush=True)
    for label, c in curves.items():
        print(f"  first runs, {label}: {c}")
    for k in names:
        print(f"  {k:18s} {med[k]:8.1f} us/batch  x naive {med['naive'] / med[k]:.2f}  x alone {med['alone (1 stream)'] / med[k]:.2f}"
              f"   rounds: {' '.join(f'{v:.0f}' for v in t[k])}", flush=True)
    rows.append((name, med, trial.get("path")))
    for p in (auto, pp, pl, th):
        if p is not None:
            p.close()
print("\n| workload | alone | naive | auto (chose) | pipelined | plain | threads | auto x alone | auto x best forced |")
for name, m, path in rows:
    best = min(v for k, v in m.items() if k in ("pipelined", "plain", "threads"))
    print(f"| {name} | {m['alone (1 stream)']:.1f} | {m['naive']:.1f} | {m['auto']:.1f} ({path}) | {m['pipelined']:.1f} | "
          f"{m['plain']:.1f} | {m.get('threads', float('nan')):.1f} | {m['alone (1 stream)'] / m['auto']:.2f} | {best / m['auto']:.2f} |")
