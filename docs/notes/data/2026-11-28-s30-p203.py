"""Session 30, a new user's side of batches of several arrays, with the defaults, on
workloads in no test: resnet18 fp16 over a DataLoader's [images, labels] (imap and
run_batches) against compute alone, the naive loop and the one-array pipeline; a dict of
two long float32 arrays through run(); two threads with pipelines of their own.
Alternating rounds, medians."""
import time, statistics, threading
import torch, torchvision
import fullpipe as fp
from torch.utils.data import DataLoader, TensorDataset

def rounds(V, n=7):
    res = {k: [] for k in V}; items = list(V.items())
    for fn in V.values(): fn()
    for r in range(n):
        for k, fn in items[r % len(items):] + items[:r % len(items)]:
            torch.cuda.synchronize(); t0 = time.perf_counter(); fn(); res[k].append((time.perf_counter() - t0) * 1e3)
    a = statistics.median(res["alone"])
    for k, v in res.items():
        m = statistics.median(v); print(f"  {k:28s} {m:8.1f} ms  {a / m:5.2f}x alone   {[round(x) for x in v]}", flush=True)

net = torchvision.models.resnet18().eval().half().cuda().to(memory_format=torch.channels_last)
@torch.inference_mode()
def loss(b):
    x, y = b
    x = x.cuda(non_blocking=True) if not x.is_cuda else x
    logits = net(x.permute(0, 3, 1, 2).half().div_(255).contiguous(memory_format=torch.channels_last))
    return torch.nn.functional.cross_entropy(logits.float(), y, reduction="none")
@torch.inference_mode()
def logits_only(x):
    return net(x.permute(0, 3, 1, 2).half().div_(255).contiguous(memory_format=torch.channels_last)).float()
imgs = torch.randint(0, 256, (3072, 160, 160, 3), dtype=torch.uint8); labels = torch.randint(0, 1000, (3072,))
loader = DataLoader(TensorDataset(imgs, labels), batch_size=128)
pairs = list(loader)
dev = [(x.cuda(), y.cuda()) for x, y in pairs]
ts = torch.cuda.Stream()
def alone():
    with torch.cuda.stream(ts):
        for b in dev: loss(b)
    ts.synchronize()
def naive():
    for x, y in pairs: loss((x.cuda(), y.cuda())).cpu()
p = fp.StreamPipeline(loss); p1 = fp.StreamPipeline(logits_only)
ref = torch.cat([loss((x.cuda(), y.cuda())).cpu() for x, y in pairs])
got = torch.cat(p.run_batches(pairs)); got2 = torch.cat(list(p.imap(loader)))
print("resnet18 loss: max err run_batches", float((got - ref).abs().max()), "imap", float((got2 - ref).abs().max()), flush=True)
print("== resnet18 fp16 over 24 batches of 128 pageable 160x160 images + labels")
rounds({"alone": alone, "naive": naive, "records run_batches": lambda: p.run_batches(pairs),
        "records imap(loader)": lambda: list(p.imap(loader)),
        "one array run_batches": lambda: p1.run_batches([x for x, _ in pairs])})
print("  stats:", p.stats)

n = 1 << 22
X = {"x": torch.randn(n, 16), "w": torch.randn(n, 16)}
@torch.inference_mode()
def dot(b): return (b["x"] * b["w"]).sum(1, keepdim=True)
want = (X["x"] * X["w"]).sum(1, keepdim=True)
pd = fp.StreamPipeline(dot)
y = pd.run(X); y = pd.run(X)
print("dict run: max err", float((y - want).abs().max()), "chunk", pd.stats.chunk.get("rows"), flush=True)
Xd = {k: v.cuda() for k, v in X.items()}
def alone_d():
    with torch.cuda.stream(ts): dot(Xd)
    ts.synchronize()
print("== dict of two 256 MiB float32 arrays, (x*w).sum(1), run()")
rounds({"alone": alone_d, "naive": lambda: dot({k: v.cuda() for k, v in X.items()}).cpu(), "records run": lambda: pd.run(X)}, 5)
print("  stats:", pd.stats)

errs = []
def worker(i):
    try:
        q = fp.StreamPipeline(loss)
        for _ in range(3):
            out = torch.cat(q.run_batches(pairs[i::2]))
            if not torch.allclose(out, torch.cat([ref[k * 128:(k + 1) * 128] for k in range(i, 24, 2)]), atol=1e-3):
                errs.append(f"thread {i}: wrong")
        q.close()
    except Exception as e:
        errs.append(repr(e))
th = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
[t.start() for t in th]; [t.join() for t in th]
print("two threads, own pipelines:", errs or "right")
