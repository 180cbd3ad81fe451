"""u2: fullpipe as a new user would try it, on workloads in no test (defaults unless said), each checked against a
naive loop and timed beside it (and compute alone where it means something)."""
import random, statistics, sys, time, traceback
import numpy as np
import torch
import fullpipe as fp

dev = torch.device("cuda")
torch.manual_seed(0)
R = {}


def timed(fn, k=5):
    ts = []
    for _ in range(k):
        torch.cuda.synchronize(); t = time.perf_counter(); fn(); torch.cuda.synchronize()
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)


def section(name):
    def deco(fn):
        try:
            t0 = time.perf_counter()
            fn()
            print(f"   ({name}: {time.perf_counter() - t0:.1f} s)", flush=True)
        except Exception:
            print(f"RESULT {name}: FAILED\n" + traceback.format_exc(), flush=True)
        return fn
    return deco


# ---- a: a server's stream of requests through imap (a generator of variable (B, L) int64 token batches)
@section("a imap requests")
def _():
    d, vocab = 512, 32000
    emb = torch.nn.Embedding(vocab, d).to(dev, torch.float16).eval()
    enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(d, 8, 2048, batch_first=True, dropout=0.0),
                                      2, enable_nested_tensor=False).to(dev, torch.float16).eval()

    @torch.inference_mode()
    def f(ids):
        return enc(emb(ids)).mean(dim=1).float()

    rnd = random.Random(3)
    reqs = [torch.randint(0, vocab, (rnd.randint(1, 48), rnd.choice([32, 64, 128, 256, 512]))) for _ in range(120)]
    ref = [f(x.to(dev)).cpu() for x in reqs]
    pipe = fp.StreamPipeline(f)
    got = list(pipe.imap(iter(reqs)))
    err = max(float((g - r).abs().max() / r.abs().max()) for g, r in zip(got, ref))
    same_kind = all(isinstance(g, torch.Tensor) and g.shape == r.shape for g, r in zip(got, ref))
    dx = [x.to(dev) for x in reqs]
    t_alone = timed(lambda: [f(x) for x in dx], 3)
    t_naive = timed(lambda: [f(x.to(dev)).cpu() for x in reqs], 3)
    t_fp = timed(lambda: list(pipe.imap(iter(reqs))), 3)
    print(f"RESULT a imap over 120 requests (1-48 x 32-512 tokens, 2-layer fp16 encoder): error {err:.1e}, tensors "
          f"of the right shapes {same_kind}; fullpipe {t_fp:.1f} ms, naive {t_naive:.1f}, compute alone {t_alone:.1f}: "
          f"{t_naive / t_fp:.2f}x naive, {t_alone / t_fp:.2f}x alone; imap_stats {getattr(pipe, 'imap_stats', None)}",
          flush=True)


# ---- b: bf16 pageable tensor in, bf16 out (run), 512 MiB
@section("b bf16 run")
def _():
    lin = torch.nn.Linear(4096, 4096).to(dev, torch.bfloat16).eval()

    @torch.inference_mode()
    def f(x):
        return lin(x)

    x = torch.randn(65536, 4096, dtype=torch.bfloat16)  # 512 MiB pageable
    pipe = fp.StreamPipeline(f)
    y = pipe.run(x)
    k = slice(0, 4096)
    ref = f(x[k].to(dev)).cpu()
    err = float((y[k].float() - ref.float()).abs().max() / ref.float().abs().max())
    tail = float((y[-4096:].float() - f(x[-4096:].to(dev)).cpu().float()).abs().max())

    def naive():
        return torch.cat([f(c.to(dev)).cpu() for c in x.split(8192)])
    t_naive = timed(naive, 3)
    t_fp = timed(lambda: pipe.run(x), 3)
    print(f"RESULT b bf16 (65536 x 4096) pageable through a bf16 Linear, run(): out {y.dtype} {tuple(y.shape)}, error "
          f"{err:.1e} (last rows {tail:.1e}); fullpipe {t_fp:.1f} ms ({2 * x.nbytes / t_fp / 1e6:.1f} GB/s in+out), "
          f"naive 8192-row loop {t_naive:.1f}: {t_naive / t_fp:.2f}x; chunk {pipe.stats.chunk and pipe.stats.chunk.get('rows')} "
          f"staging {pipe.stats.staging}", flush=True)


# ---- c: dict batches (ids + padding mask) through an encoder, run_batches
@section("c dict batches")
def _():
    d = 256
    emb = torch.nn.Embedding(1000, d).to(dev).eval()
    layer = torch.nn.TransformerEncoderLayer(d, 4, 1024, batch_first=True, dropout=0.0).to(dev).eval()

    @torch.inference_mode()
    def f(b):
        h = layer(emb(b["ids"]), src_key_padding_mask=~b["mask"])
        m = b["mask"].unsqueeze(-1).float()
        return (h * m).sum(1) / m.sum(1)

    rnd = random.Random(5)
    batches = []
    for _ in range(60):
        B, L = rnd.randint(2, 32), rnd.choice([16, 64, 128])
        lens = torch.randint(1, L + 1, (B,))
        mask = torch.arange(L)[None, :] < lens[:, None]
        batches.append({"ids": torch.randint(0, 1000, (B, L), dtype=torch.int32), "mask": mask})
    ref = [f({k: v.to(dev) for k, v in b.items()}).cpu() for b in batches]
    pipe = fp.StreamPipeline(f)
    got = pipe.run_batches(batches)
    err = max(float((g - r).abs().max() / r.abs().max()) for g, r in zip(got, ref))
    t_naive = timed(lambda: [f({k: v.to(dev) for k, v in b.items()}).cpu() for b in batches], 3)
    t_fp = timed(lambda: pipe.run_batches(batches), 3)
    print(f"RESULT c 60 dict batches (ids int32 + bool mask) through an encoder layer: error {err:.1e}; fullpipe "
          f"{t_fp:.1f} ms, naive {t_naive:.1f}: {t_naive / t_fp:.2f}x; list path {(pipe.stats.list_path or {}).get('path')}",
          flush=True)


# ---- d: graph=True over a host-bound MLP, run() on a float32 array
@section("d graph=True")
def _():
    mlp = torch.nn.Sequential(*[m for _ in range(6) for m in (torch.nn.Linear(256, 256), torch.nn.GELU())]).to(dev).eval()

    @torch.inference_mode()
    def f(x):
        return mlp(x)

    x = np.random.default_rng(0).standard_normal((1 << 18, 256), dtype=np.float32)  # 256 MiB
    ref = f(torch.from_numpy(x[:4096]).to(dev)).cpu().numpy()
    out = {}
    for g in (False, True):
        pipe = fp.StreamPipeline(f, chunk=4096, graph=g)
        y = pipe.run(x)
        y = pipe.run(x)
        out[g] = (float(np.abs(y[:4096] - ref).max()), timed(lambda: pipe.run(x), 3), pipe.stats)
    xd = torch.from_numpy(x).to(dev)
    t_alone = timed(lambda: [f(c) for c in xd.split(4096)], 3)
    st = out[True][2]
    print(f"RESULT d 64 chunks of 4096 x 256 f32 through a 12-op MLP: graph=False {out[False][1]:.1f} ms (error "
          f"{out[False][0]:.1e}), graph=True {out[True][1]:.1f} ms (error {out[True][0]:.1e}), compute alone (eager, "
          f"device-resident) {t_alone:.1f}; graph stats {st.graph}; host_us {({k: round(v) for k, v in st.host_us.items()})}",
          flush=True)


# ---- e: mistakes a user makes: the error says what to do, and the pipeline still works after
@section("e errors")
def _():
    lin = torch.nn.Linear(64, 32).to(dev).eval()
    pipe = fp.StreamPipeline(lambda x: lin(x))
    x = torch.randn(1000, 64)
    cases = {
        "returns a tuple": (fp.StreamPipeline(lambda x: (lin(x), x)), lambda p: p.run(x)),
        "returns a CPU tensor": (fp.StreamPipeline(lambda x: lin(x).cpu()), lambda p: p.run(x)),
        "non-contiguous input": (pipe, lambda p: p.run(torch.randn(64, 1000).t())),
        "outs of the wrong rows": (pipe, lambda p: p.run_batches([x, x], outs=[torch.empty(1000, 32), torch.empty(999, 32)])),
        "a CUDA tensor input": (pipe, lambda p: p.run(x.to(dev))),
        "int chunk larger than the input": (fp.StreamPipeline(lambda x: lin(x), chunk=10 ** 9), lambda p: p.run(x)),
    }
    for name, (p, call) in cases.items():
        try:
            with torch.inference_mode():
                r = call(p)
            msg = f"no error (returned {type(r).__name__})"
        except Exception as exc:
            msg = f"{type(exc).__name__}: {str(exc)[:150]}"
        print(f"RESULT e {name}: {msg}", flush=True)
    with torch.inference_mode():
        y = pipe.run(x)
        ok = torch.allclose(y, lin(x.to(dev)).cpu(), atol=1e-4)
    print(f"RESULT e the pipeline after those: correct {ok}", flush=True)
