"""BERT (HF, random weights, fp16) over 96 batches of different (b, L): where fullpipe's time goes
against the naive loop and compute alone (device-resident), alternating rounds."""
import time, statistics, gc
import numpy as np, torch
import fullpipe as fp
from transformers import BertConfig, BertModel

torch.manual_seed(0)
cfg = BertConfig(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, intermediate_size=2048)
m = BertModel(cfg).cuda().half().eval()
rng = np.random.default_rng(1)
batches = [rng.integers(0, 30522, size=(int(rng.integers(1, 33)), int(rng.choice([32, 64, 128, 256]))), dtype=np.int64) for _ in range(96)]
n = len(batches)
call_us = []
@torch.inference_mode()
def f(ids):
    t0 = time.perf_counter()
    y = m(input_ids=ids).last_hidden_state[:, 0].float()
    call_us.append((time.perf_counter() - t0) * 1e6)
    return y
dev_batches = [torch.from_numpy(b).cuda() for b in batches]

def naive():
    with torch.inference_mode():
        return [f(torch.from_numpy(b).cuda()).cpu() for b in batches]
def alone():
    with torch.inference_mode():
        ys = [f(b) for b in dev_batches]
    torch.cuda.synchronize()
pipes = {"defaults": fp.StreamPipeline(f), "timing=False": fp.StreamPipeline(f, timing=False),
         "streams=1": fp.StreamPipeline(f, streams=1), "compute_threads=3": fp.StreamPipeline(f, compute_threads=3)}
contenders = {"naive": naive, "compute alone": alone}
for k, p in pipes.items():
    contenders[k] = (lambda p=p: p.run_batches(batches))
for c in contenders.values():  # warm every shape everywhere
    c(); c()
res = {k: [] for k in contenders}; calls = {k: [] for k in contenders}; stats = {}
names = list(contenders)
for r in range(6):
    order = names[r % len(names):] + names[:r % len(names)]
    if r % 2: order = order[::-1]
    for k in order:
        call_us.clear(); torch.cuda.synchronize(); t0 = time.perf_counter(); contenders[k](); torch.cuda.synchronize()
        res[k].append((time.perf_counter() - t0) * 1e3); calls[k].append(statistics.median(call_us) if call_us else 0)
        if k in pipes: stats[k] = pipes[k].stats
base = statistics.median(res["compute alone"])
print(f"{'contender':20s} {'median ms':>10s} {'min ms':>8s} {'x alone':>8s} {'call med us':>12s}")
for k in names:
    print(f"{k:20s} {statistics.median(res[k]):10.2f} {min(res[k]):8.2f} {base/statistics.median(res[k]):8.3f} {statistics.median(calls[k]):12.1f}")
for k, st in stats.items():
    print(k, "host_us", {a: round(b, 1) for a, b in st.host_us.items()}, "staging", st.staging, "enqueue/batch", round(st.enqueue_us_per_batch, 1))
# GC in the loop?
print("gc counts", gc.get_count(), "gc stats", gc.get_stats()[0])
