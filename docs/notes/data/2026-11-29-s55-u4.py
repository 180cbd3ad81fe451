"""u4: u3's imap requests, its trial's first passes only (for py-spy); u2's a and c run until their list trials are done; fullpipe as a new user would try it, on workloads in no test (defaults unless said), each checked against a
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
@section("a imap requests, steady")
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
    # the same model called on fresh shapes: on this thread, on one new thread, on three at once (own streams)
    import threading
    rnd2 = random.Random(11)
    fresh = [torch.randint(0, vocab, (rnd2.randint(1, 48), rnd2.choice([32, 64, 128, 256, 512]))).to(dev)
             for _ in range(160)]

    def calls(xs, stream, out):
        with torch.cuda.stream(stream):
            t = time.perf_counter()
            for x in xs:
                f(x)
            stream.synchronize()
            out.append((time.perf_counter() - t) * 1e6 / len(xs))

    s0 = torch.cuda.Stream()
    got = []; calls(fresh[:40], s0, got)
    got2 = []; th = threading.Thread(target=calls, args=(fresh[40:80], torch.cuda.Stream(), got2)); th.start(); th.join()
    got3 = []; ths = [threading.Thread(target=calls, args=(fresh[80 + 20 * i:100 + 20 * i], torch.cuda.Stream(), got3))
                      for i in range(3)]
    t3 = time.perf_counter(); [t.start() for t in ths]; [t.join() for t in ths]; t3 = (time.perf_counter() - t3) * 1e6 / 60
    again = []; calls(fresh[:40], s0, again)
    print(f"RESULT t new shapes, us a call: this thread {got[0]:.0f}, one new thread {got2[0]:.0f}, three threads at "
          f"once {[round(g) for g in got3]} ({t3:.0f} a call in all), this thread on seen shapes {again[0]:.0f}", flush=True)
    ref = [f(x.to(dev)).cpu() for x in reqs]
    pipe = fp.StreamPipeline(f)
    got = list(pipe.imap(iter(reqs)))
    err = max(float((g - r).abs().max() / r.abs().max()) for g, r in zip(got, ref))
    same_kind = all(isinstance(g, torch.Tensor) and g.shape == r.shape for g, r in zip(got, ref))
    dx = [x.to(dev) for x in reqs]
    t_alone = timed(lambda: [f(x) for x in dx], 3)
    t_naive = timed(lambda: [f(x.to(dev)).cpu() for x in reqs], 3)
    per = []
    for i in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
        t = time.perf_counter(); list(pipe.imap(iter(reqs))); per.append((time.perf_counter() - t) * 1e3)
        print(f"   a pass {i}: {per[-1]:.1f} ms, last window's path {(pipe.stats.list_path or {})}", flush=True)
    t_fp = statistics.median(per)
    return
    print(f"RESULT a imap over 120 requests (1-48 x 32-512 tokens, 2-layer fp16 encoder): error {err:.1e}, tensors "
          f"of the right shapes {same_kind}; fullpipe {t_fp:.1f} ms, naive {t_naive:.1f}, compute alone {t_alone:.1f}: "
          f"{t_naive / t_fp:.2f}x naive, {t_alone / t_fp:.2f}x alone; imap_stats {getattr(pipe, 'imap_stats', None)}",
          flush=True)


