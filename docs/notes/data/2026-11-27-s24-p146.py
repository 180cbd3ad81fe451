"""A new user's models, not in the tests: right rows, and time vs the naive loop (same process,
alternating rounds). Each trial prints one line; failures print the exception and go on."""
import time, traceback, warnings, statistics, sys
import numpy as np, torch
import fullpipe as fp

torch.manual_seed(0)
rows = []
def timeit(fn, rounds=3):
    ts = []
    for _ in range(rounds):
        torch.cuda.synchronize(); t0 = time.perf_counter(); fn(); torch.cuda.synchronize(); ts.append(time.perf_counter() - t0)
    return min(ts)

def err(a, b):
    a = torch.as_tensor(np.asarray(a) if not torch.is_tensor(a) else a).float(); b = torch.as_tensor(np.asarray(b) if not torch.is_tensor(b) else b).float()
    if a.shape != b.shape: return f"shape {tuple(a.shape)} vs {tuple(b.shape)}"
    return float((a - b).abs().max())

def trial(name, make):
    print(f"--- {name}", flush=True)
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            fullpipe_fn, naive_fn, check = make()
            t_first0 = time.perf_counter(); got = fullpipe_fn(); t_first = time.perf_counter() - t_first0
            ref = naive_fn()
            e = check(got, ref)
            tf, tn = [], []
            for r in range(3):
                for which in ((0, 1) if r % 2 == 0 else (1, 0)):
                    (tf if which == 0 else tn).append(timeit(fullpipe_fn if which == 0 else naive_fn, 1))
            f_ms, n_ms = min(tf) * 1e3, min(tn) * 1e3
            msgs = sorted({str(x.message)[:160] for x in w})
        line = f"{name:42s} err {e}  first {t_first*1e3:8.1f} ms  fullpipe {f_ms:8.2f} ms  naive {n_ms:8.2f} ms  x{n_ms/f_ms:5.2f}"
        print(line); rows.append(line)
        for m in msgs: print("   warning:", m)
    except Exception as exc:
        line = f"{name:42s} FAILED {type(exc).__name__}: {str(exc)[:300]}"
        print(line); traceback.print_exc(); rows.append(line)

@torch.inference_mode()
def naive_loop(f, x, chunk):
    outs = [f(torch.from_numpy(x[i:i+chunk]).cuda()).cpu() for i in range(0, len(x), chunk)]
    return torch.cat(outs).numpy()

# 1. HF BERT, random weights, fp16, batches of different (batch, seq) shapes, CLS embedding out
def bert():
    from transformers import BertConfig, BertModel
    cfg = BertConfig(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, intermediate_size=2048, vocab_size=30522)
    m = BertModel(cfg).cuda().half().eval()
    rng = np.random.default_rng(1)
    batches = [rng.integers(0, 30522, size=(int(rng.integers(1, 33)), int(rng.choice([32, 64, 128, 256]))), dtype=np.int64) for _ in range(96)]
    @torch.inference_mode()
    def f(ids): return m(input_ids=ids).last_hidden_state[:, 0].float()
    pipe = fp.StreamPipeline(f)
    def naive(): 
        with torch.inference_mode(): return [f(torch.from_numpy(b).cuda()).cpu().numpy() for b in batches]
    def check(g, r): return max(float(np.abs(a - b).max()) for a, b in zip(g, r))
    return (lambda: pipe.run_batches(batches)), naive, check

# 2. torchvision mobilenet_v3_large fp16 channels_last over uint8 160x160 images, run()
def mobilenet():
    import torchvision
    m = torchvision.models.mobilenet_v3_large().cuda().half().to(memory_format=torch.channels_last).eval()
    x = np.random.default_rng(2).integers(0, 255, size=(8192, 3, 160, 160), dtype=np.uint8)
    @torch.inference_mode()
    def f(u8): return m((u8.half() / 255).contiguous(memory_format=torch.channels_last)).float()
    pipe = fp.StreamPipeline(f)
    return (lambda: pipe.run(x)), (lambda: naive_loop(f, x, 256)), (lambda g, r: float(np.abs(g - r).max()))

# 3. cuDNN LSTM fp32 over (N, T, F), last hidden state out
def lstm():
    m = torch.nn.LSTM(64, 128, num_layers=2, batch_first=True).cuda().eval()
    x = np.random.default_rng(3).standard_normal((65536, 32, 64), dtype=np.float32)
    @torch.inference_mode()
    def f(t): return m(t)[1][0][-1]
    pipe = fp.StreamPipeline(f)
    return (lambda: pipe.run(x)), (lambda: naive_loop(f, x, 4096)), (lambda g, r: float(np.abs(g - r).max()))

# 4. classifier: argmax, int64 per row (1-D output); input float64
def argmax64():
    m = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 1000)).cuda().eval()
    x = np.random.default_rng(4).standard_normal((200000, 512))  # float64
    @torch.inference_mode()
    def f(t): return m(t.float()).argmax(dim=1)
    pipe = fp.StreamPipeline(f)
    return (lambda: pipe.run(x)), (lambda: naive_loop(f, x, 8192)), (lambda g, r: int((np.asarray(g) != r).sum()))

# 5. a pinned torch tensor in, a strided view returned (every other column)
def strided():
    m = torch.nn.Linear(256, 512).cuda().eval()
    xt = torch.randn(262144, 256).pin_memory()
    @torch.inference_mode()
    def f(t): return m(t)[:, ::2]
    pipe = fp.StreamPipeline(f)
    def naive():
        with torch.inference_mode(): return torch.cat([f(xt[i:i+8192].cuda()).cpu() for i in range(0, len(xt), 8192)])
    def check(g, r): return f"{type(g).__name__} pinned={g.is_pinned()} err={float((g - r).abs().max())}"
    return (lambda: pipe.run(xt)), naive, check

# 6. imap over a generator of pageable batches of a 1-D conv model
def imap_conv():
    m = torch.nn.Sequential(torch.nn.Conv1d(16, 64, 5, padding=2), torch.nn.GELU(), torch.nn.Conv1d(64, 16, 5, padding=2)).cuda().eval()
    rng = np.random.default_rng(6)
    data = [rng.standard_normal((int(rng.integers(64, 512)), 16, 1024), dtype=np.float32) for _ in range(40)]
    @torch.inference_mode()
    def f(t): return m(t)
    pipe = fp.StreamPipeline(f)
    def naive():
        with torch.inference_mode(): return [f(torch.from_numpy(b).cuda()).cpu().numpy() for b in data]
    def check(g, r): return max(float(np.abs(a - b).max()) for a, b in zip(g, r))
    return (lambda: list(pipe.imap(iter(data)))), naive, check

# 7. a dict-returning compute (a new user's first try with an HF-style model) — expect a clear error
def dict_out():
    m = torch.nn.Linear(64, 64).cuda()
    x = np.random.default_rng(7).standard_normal((100000, 64), dtype=np.float32)
    def f(t): return {"y": m(t)}
    pipe = fp.StreamPipeline(f)
    return (lambda: pipe.run(x)), (lambda: None), (lambda g, r: "no error?")

for name, make in [("bert run_batches 96 var (b, L)", bert), ("mobilenet_v3_large run 8192 u8 160px", mobilenet),
                   ("lstm fp32 run 65536x32x64", lstm), ("argmax int64 out, float64 in", argmax64),
                   ("pinned torch in, strided view out", strided), ("imap conv1d 40 pageable", imap_conv),
                   ("dict output", dict_out)]:
    trial(name, make)
print("=== summary")
for r in rows: print(r)
