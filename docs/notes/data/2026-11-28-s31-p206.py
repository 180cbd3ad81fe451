"""Session 31: records of large fields, fair peers. resnet18 fp16 loss over [images, labels]:
records against the one-array pipeline of the same loss (labels already on the device),
the naive loop, compute alone; then a DataLoader (num_workers=0, and 4 with pin_memory=True,
the usual training loader): imap(loader) against the naive loop over the same loader.
Alternating rounds, medians."""
import time, statistics
import numpy as np, torch, torchvision
import fullpipe as fp
from torch.utils.data import DataLoader, TensorDataset

def rounds(V, n=9, base="alone"):
    res = {k: [] for k in V}; items = list(V.items())
    for fn in V.values(): fn()
    for r in range(n):
        for k, fn in items[r % len(items):] + items[:r % len(items)]:
            torch.cuda.synchronize(); t0 = time.perf_counter(); fn(); res[k].append((time.perf_counter() - t0) * 1e3)
    a = statistics.median(res[base])
    for k, v in res.items():
        m = statistics.median(v); print(f"  {k:34s} {m:8.1f} ms  {a / m:5.2f}x {base}   {[round(x) for x in v]}", flush=True)

ts = torch.cuda.Stream()
net = torchvision.models.resnet18().eval().half().cuda().to(memory_format=torch.channels_last)
@torch.inference_mode()
def loss(b):
    x, y = b
    logits = net(x.permute(0, 3, 1, 2).half().div_(255).contiguous(memory_format=torch.channels_last))
    return torch.nn.functional.cross_entropy(logits.float(), y, reduction="none")
imgs = torch.randint(0, 256, (3072, 160, 160, 3), dtype=torch.uint8); labels = torch.randint(0, 1000, (3072,))
pairs = [(imgs[i:i + 128].clone(), labels[i:i + 128].clone()) for i in range(0, 3072, 128)]
lab_dev = [y.cuda() for _, y in pairs]
order = {}
@torch.inference_mode()
def loss_one(x):  # the same loss, its labels on the device already (batch k's, by its rows' first byte... by call order)
    k = order["k"]; order["k"] += 1
    return loss((x, lab_dev[k % len(lab_dev)]))
def one_array():
    order["k"] = 0
    return p1.run_batches([x for x, _ in pairs])
dev = [(x.cuda(), y.cuda()) for x, y in pairs]
def alone():
    with torch.cuda.stream(ts):
        for b in dev: loss(b)
    ts.synchronize()
p, p1 = fp.StreamPipeline(loss), fp.StreamPipeline(loss_one)
ref = torch.cat([loss((x.cuda(), y.cuda())).cpu() for x, y in pairs])
print("max err records", float((torch.cat(p.run_batches(pairs)) - ref).abs().max()),
      "one array", float((torch.cat(one_array()) - ref).abs().max()), flush=True)
print("== resnet18 fp16 loss over 24 batches of 128 pageable 160x160 images + labels", flush=True)
rounds({"alone": alone, "naive": lambda: [loss((x.cuda(), y.cuda())).cpu() for x, y in pairs],
        "records run_batches": lambda: p.run_batches(pairs), "one array run_batches": one_array})
print("  records:", p.stats.staging, p.stats.host_copies, "one array:", p1.stats.staging, flush=True)

ds = TensorDataset(imgs, labels)
for workers, pin in ((0, False), (4, True)):
    loader = DataLoader(ds, batch_size=128, num_workers=workers, pin_memory=pin, persistent_workers=workers > 0)
    def naive_loader():
        return [loss((x.cuda(non_blocking=pin), y.cuda(non_blocking=pin))).cpu() for x, y in loader]
    def naive_list():
        return [loss((x.cuda(), y.cuda())).cpu() for x, y in pairs]
    pl = fp.StreamPipeline(loss)
    got = torch.cat(list(pl.imap(loader)))
    print(f"== DataLoader num_workers={workers} pin_memory={pin}: imap max err {float((got - ref).abs().max())}", flush=True)
    rounds({"naive over the loader": naive_loader, "imap(loader)": lambda: list(pl.imap(loader)),
            "iterating the loader alone": lambda: [None for _ in loader]}, 7, base="naive over the loader")
    print("  imap stats:", pl.stats.staging, pl.imap_stats, flush=True)
