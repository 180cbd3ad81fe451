"""Session 34: a new user's side with the defaults, on workloads in no test and no earlier
probe: a ViT, an efficientnet over variable image lists, bf16 tensors in and out,
torch.compile (default mode) over a long list, odd GEMM and attention shapes, an LSTM
through imap, a failing batch mid-list. Each: correct? time against the naive loop."""
import statistics, sys, time, traceback, warnings
import numpy as np
import torch
import torchvision
import fullpipe as fp
from fullpipe import kernels

torch.manual_seed(0)
dev = torch.device("cuda")
warnings.simplefilter("default")
results = []


def timed(fn, rounds=5):
    ts = []
    for _ in range(rounds):
        torch.cuda.synchronize(); t0 = time.perf_counter(); fn(); torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def case(name):
    def deco(fn):
        t0 = time.perf_counter()
        try:
            msg = fn()
        except Exception as exc:
            msg = f"ERROR {type(exc).__name__}: {exc}"
            traceback.print_exc()
        results.append((name, msg, time.perf_counter() - t0))
        print(f"[{name}] {msg} ({time.perf_counter() - t0:.1f} s)", flush=True)
    return deco


@case("vit_b_16 fp16, run() over 1024 pageable uint8 224^2 images")
def _():
    m = torchvision.models.vit_b_16().half().eval().to(dev)
    x = torch.randint(0, 255, (1024, 3, 224, 224), dtype=torch.uint8)
    def f(t):
        with torch.inference_mode():
            return m(t.half().div_(255)).float()
    pipe = fp.StreamPipeline(f)
    first = timed(lambda: pipe.run(x), rounds=1)
    y = pipe.run(x)
    def naive():
        return torch.cat([f(c.cuda()).cpu() for c in x.split(128)])
    ref = naive()
    err = (y - ref).abs().max().item()
    tn, tf = timed(naive), timed(lambda: pipe.run(x))
    return (f"max err {err:.3g}; first run {first:.0f} ms; naive {tn:.1f} ms, fullpipe {tf:.1f} ms "
            f"({tn / tf:.2f}x); chunk {pipe.stats.chunk.get('rows')} rows ({pipe.stats.chunk.get('source')})")


@case("efficientnet_b0 bf16 channels_last, run_batches of 12 lists of 20 batches of 8-64 images 160^2")
def _():
    m = torchvision.models.efficientnet_b0().to(dev, torch.bfloat16).to(memory_format=torch.channels_last).eval()
    def f(t):
        with torch.inference_mode():
            return m(t.to(torch.bfloat16).div_(255).contiguous(memory_format=torch.channels_last)).float()
    rng = np.random.default_rng(1)
    lists = [[torch.randint(0, 255, (int(rng.integers(8, 65)), 3, 160, 160), dtype=torch.uint8) for _ in range(20)]
             for _ in range(12)]
    pipe = fp.StreamPipeline(f)
    times, errs = [], []
    for xs in lists:
        t0 = time.perf_counter(); ys = pipe.run_batches(xs); times.append((time.perf_counter() - t0) * 1e3)
    for xs, ys in zip(lists[-2:], [pipe.run_batches(l) for l in lists[-2:]]):
        errs += [(y - f(x.cuda()).cpu()).abs().max().item() for x, y in zip(xs, ys)]
    tn = timed(lambda: [f(x.cuda()).cpu() for x in lists[-1]])
    tf = timed(lambda: pipe.run_batches(lists[-1]))
    return (f"max err {max(errs):.3g}; run times ms {[round(t) for t in times]}; last list naive {tn:.1f} ms, "
            f"fullpipe {tf:.1f} ms ({tn / tf:.2f}x); padded {pipe.stats.padded if hasattr(pipe.stats, 'padded') else '?'}; "
            f"list_path {pipe.stats.list_path}")


@case("bf16 torch tensors in and out, Linear 1024->4096 bf16, run_batches of 40 batches")
def _():
    lin = torch.nn.Linear(1024, 4096, dtype=torch.bfloat16, device=dev)
    def f(t):
        with torch.inference_mode():
            return lin(t)
    xs = [torch.randn(int(n), 1024, dtype=torch.bfloat16) for n in np.random.default_rng(2).integers(16, 512, 40)]
    pipe = fp.StreamPipeline(f)
    ys = pipe.run_batches(xs)
    ok = all(y.dtype == torch.bfloat16 and torch.equal(y, f(x.cuda()).cpu()) for x, y in zip(xs, ys))
    for _ in range(8):
        pipe.run_batches(xs)
    tn = timed(lambda: [f(x.cuda()).cpu() for x in xs]); tf = timed(lambda: pipe.run_batches(xs))
    return f"bit-equal {ok}; naive {tn:.1f} ms, fullpipe {tf:.1f} ms ({tn / tf:.2f}x); {pipe.stats.list_path}"


@case("torch.compile (default mode) MLP, 10 runs of a 60-batch list")
def _():
    mlp = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).to(dev)
    cm = torch.compile(mlp)
    def f(t):
        with torch.inference_mode():
            return cm(t)
    xs = [torch.randn(int(n), 256) for n in np.random.default_rng(3).integers(32, 256, 60)]
    pipe = fp.StreamPipeline(f)
    for _ in range(10):
        ys = pipe.run_batches(xs)
    with torch.inference_mode():
        err = max((y - mlp(x.cuda()).cpu()).abs().max().item() for x, y in zip(xs, ys))
    tn = timed(lambda: [f(x.cuda()).cpu() for x in xs]); tf = timed(lambda: pipe.run_batches(xs))
    return f"max err {err:.3g}; naive {tn:.1f} ms, fullpipe {tf:.1f} ms ({tn / tf:.2f}x); {pipe.stats.list_path}"


@case("kernels.gemm hopper on odd shapes")
def _():
    out = []
    s = torch.cuda.current_stream()
    for (m, k, n, dt) in [(1000, 777, 3000, torch.float16), (1, 4096, 4096, torch.bfloat16),
                          (4095, 4096, 4097, torch.bfloat16), (333, 64, 4000, torch.float16)]:
        a = torch.randn(m, k, dtype=dt, device=dev); b = torch.randn(k, n, dtype=dt, device=dev)
        try:
            c = kernels.gemm(a, b, variant="hopper", stream=s)
            ref = (a.float() @ b.float())
            rel = ((c.float() - ref).norm() / ref.norm()).item()
            out.append(f"{m}x{k}x{n} {str(dt)[6:]} rel {rel:.2g}")
        except Exception as exc:
            out.append(f"{m}x{k}x{n}: {type(exc).__name__}: {str(exc)[:160]}")
    return "; ".join(out)


@case("kernels.attention odd sequence lengths, causal and not, GQA")
def _():
    out = []
    for (B, S, Hq, Hkv, D, causal) in [(2, 1000, 16, 16, 128, True), (1, 77, 8, 2, 64, False),
                                       (3, 4097, 32, 8, 128, True)]:
        q = torch.randn(B, S, Hq, D, dtype=torch.bfloat16, device=dev)
        k = torch.randn(B, S, Hkv, D, dtype=torch.bfloat16, device=dev); v = torch.randn_like(k)
        o = kernels.attention(q, k, v, causal=causal)
        rep = Hq // Hkv
        ref = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2).float(), k.transpose(1, 2).float().repeat_interleave(rep, 1),
            v.transpose(1, 2).float().repeat_interleave(rep, 1), is_causal=causal).transpose(1, 2)
        out.append(f"B{B} S{S} H{Hq}/{Hkv} D{D} {'causal' if causal else 'full'}: max err "
                   f"{(o.float() - ref).abs().max().item():.3g}")
    return "; ".join(out)


@case("LSTM through imap of 50 pageable variable batches (a generator)")
def _():
    lstm = torch.nn.LSTM(64, 128, num_layers=2, batch_first=True).to(dev).eval()
    def f(t):
        with torch.inference_mode():
            return lstm(t)[0][:, -1]
    rng = np.random.default_rng(4)
    xs = [torch.randn(int(rng.integers(4, 64)), int(rng.integers(8, 48)), 64) for _ in range(50)]
    pipe = fp.StreamPipeline(f)
    ys = list(pipe.imap(x for x in xs))
    err = max((y - f(x.cuda()).cpu()).abs().max().item() for x, y in zip(xs, ys))
    tn = timed(lambda: [f(x.cuda()).cpu() for x in xs]); tf = timed(lambda: list(pipe.imap(iter(xs))))
    return f"{len(ys)} outputs, max err {err:.3g}; naive {tn:.1f} ms, fullpipe {tf:.1f} ms ({tn / tf:.2f}x)"


@case("a batch that fails mid-list (batch 20 of 40), then the same pipeline again")
def _():
    lin = torch.nn.Linear(128, 128).to(dev)
    def f(t):
        if t.shape[0] == 13:
            raise RuntimeError("bad batch")
        with torch.inference_mode():
            return lin(t)
    xs = [torch.randn(13 if i == 20 else 50, 128) for i in range(40)]
    pool = fp.DevicePool(fp.Device(0))
    pipe = fp.StreamPipeline(f, pool=pool)
    try:
        pipe.run_batches(xs)
        return "no error raised!"
    except RuntimeError as exc:
        note = " | ".join(getattr(exc, "__notes__", []))[:300]
    xs[20] = torch.randn(50, 128)
    ys = pipe.run_batches(xs)
    ok = all(torch.allclose(y, f(x.cuda()).cpu(), atol=1e-5) for x, y in zip(xs, ys))
    return f"raised with note: {note!r}; next run right {ok}; pool used {pool.stats().used_bytes} B, live allocations {pool.stats().allocations}"


print("\n==== summary")
for name, msg, s in results:
    print(f"- {name}: {msg[:400]}")
