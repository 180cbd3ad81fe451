"""Session 35: compute_threads="auto" (list_paths.py's third way) on long lists: the trial's
choice against each way forced (pipelined, plain, 3 compute threads), the naive loop and
compute alone (one stream, device-resident). Alternating rounds (order rotated), medians;
us per batch. Workloads of p226 plus ones not in any test."""
import random, statistics, sys, time, warnings
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
    emb5 = torch.nn.Embedding(32000, 512, dtype=torch.bfloat16).eval()
    enc2 = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(512, 8, 2048, dropout=0.0, batch_first=True,
                                       norm_first=True, dtype=torch.bfloat16), 2, enable_nested_tensor=False).eval()
    gru_emb = torch.nn.Embedding(8000, 256).eval()
    gru = torch.nn.GRU(256, 512, num_layers=2, batch_first=True).eval()
    # a hand-written pre-norm attention block (LLM-like, not nn.TransformerEncoderLayer's fused path)
    ln1, qkv, proj = torch.nn.LayerNorm(768), torch.nn.Linear(768, 3 * 768), torch.nn.Linear(768, 768)
    ln2, up, down = torch.nn.LayerNorm(768), torch.nn.Linear(768, 3072), torch.nn.Linear(3072, 768)
    for m in (ln1, qkv, proj, ln2, up, down):
        m.to(torch.bfloat16).eval()
    small = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256)).eval()
compiled = torch.compile(small, mode="reduce-overhead")


def double(x):
    return x * 2


def tiny_f(x):
    with torch.inference_mode():
        return mlp(x)


def enc(ids):
    with torch.inference_mode():
        return layer(emb(ids)).float().mean(dim=1)


def enc2_f(ids):
    with torch.inference_mode():
        return enc2(emb5(ids)).float().mean(dim=1)


def gru_f(ids):
    with torch.inference_mode():
        out, h = gru(gru_emb(ids))
        return h[-1]


def block(x):  # (B, L, 768) float32 -> (B, 768): a pre-norm attention block by hand, then mean
    with torch.inference_mode():
        h = x.to(torch.bfloat16)
        B, L, D = h.shape
        q, k, v = qkv(ln1(h)).view(B, L, 3, 12, 64).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + proj(a.transpose(1, 2).reshape(B, L, D))
        h = h + down(torch.nn.functional.gelu(up(ln2(h))))
        return h.float().mean(dim=1)


def chain(x):  # many small elementwise operators: mostly Python
    with torch.inference_mode():
        for _ in range(24):
            x = x * 1.0001 + 0.001
        return x


def compiled_f(x):  # torch.compile's CUDA graphs, called with some host work around
    with torch.inference_mode():
        y = compiled(x)
        return y.clone()


rnd = random.Random(14); g = torch.Generator().manual_seed(0); bx = []; tok = 0
while tok < 1 << 20:
    seq = rnd.choice((64, 128, 256, 512)); b = max(1, rnd.randint(2048, 16384) // seq)
    bx.append(torch.randint(0, 32000, (b, seq), dtype=torch.int32, generator=g)); tok += b * seq
r = np.random.default_rng(1)
cases = {
    "x*2, 400 x 32x512 f32": (double, [torch.randn(32, 512) for _ in range(400)]),
    "MLP, 300 x 4-32 rows": (tiny_f, [torch.randn(int(n), 512) for n in r.integers(4, 33, 300)]),
    "encoder d1024 (bench's), 127 batches": (enc, bx),
    "encoder 2x d512 pre-norm, 127 batches": (enc2_f, bx),
    "GRU 2x512, 200 x 8-32 seqs of 64 ids": (gru_f, [torch.randint(0, 8000, (int(n), 64)) for n in r.integers(8, 33, 200)]),
    "attention block d768 by hand, 100 x 2-16 x 128-512 f32": (
        block, [torch.randn(int(b), int(l), 768) for b, l in zip(r.integers(2, 17, 100), r.choice([128, 256, 512], 100))]),
    "chain of 48 elementwise ops, 200 x 64x256": (chain, [torch.randn(64, 256) for _ in range(200)]),
    "torch.compile reduce-overhead MLP, 100 x 64x256": (compiled_f, [torch.randn(64, 256) for _ in range(100)]),
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
    pl._list_paths.next_path = lambda key, may_thread=False: PLAIN
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
            err = max(float((as_t(a).float() - b.float()).abs().max()) for a, b in zip(got, ref))
            assert err <= 2e-2, (name, label, err)
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
