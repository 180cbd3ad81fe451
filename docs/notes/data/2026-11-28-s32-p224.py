"""Session 32: imap's read_ahead="auto" (the new default) over DataLoaders without workers,
against read_ahead=True (the old default), read_ahead=False and the naive loop over the same
loader; the loader alone as a reference. Two loaders: session 31's TensorDataset of images
and labels through a resnet18 loss, and a map-style dataset whose __getitem__ is Python per
sample (a NumPy crop and flip) through the same network. Alternating rounds, medians."""
import statistics, time
import numpy as np, torch, torchvision
import fullpipe as fp
from torch.utils.data import DataLoader, Dataset, TensorDataset

net = torchvision.models.resnet18().eval().half().cuda().to(memory_format=torch.channels_last)


@torch.inference_mode()
def loss(b):
    x, y = b
    logits = net(x.permute(0, 3, 1, 2).half().div_(255).contiguous(memory_format=torch.channels_last))
    return torch.nn.functional.cross_entropy(logits.float(), y, reduction="none")


class Crops(Dataset):
    """Per sample: a random 128x128 crop of a 160x160 image, flipped half the time (NumPy)."""

    def __init__(self, n):
        self.imgs = np.random.default_rng(0).integers(0, 256, (n, 160, 160, 3), dtype=np.uint8)
        self.labels = np.random.default_rng(1).integers(0, 1000, n)

    def __len__(self):
        return len(self.imgs)

    def __getitem__(self, i):
        r = np.random.default_rng(i)
        a, b = r.integers(0, 33, 2)
        img = self.imgs[i, a:a + 128, b:b + 128]
        if r.random() < 0.5:
            img = img[:, ::-1]
        return torch.from_numpy(np.ascontiguousarray(img)), int(self.labels[i])


def rounds(V, n=7, base="naive"):
    res = {k: [] for k in V}; items = list(V.items())
    for fn in V.values():
        fn()
    for r in range(n):
        for k, fn in items[r % len(items):] + items[:r % len(items)]:
            torch.cuda.synchronize(); t0 = time.perf_counter(); fn(); res[k].append((time.perf_counter() - t0) * 1e3)
    a = statistics.median(res[base])
    for k, v in res.items():
        m = statistics.median(v)
        print(f"  {k:32s} {m:8.1f} ms  {a / m:5.2f}x {base}   {[round(x) for x in v]}", flush=True)


imgs = torch.randint(0, 256, (3072, 160, 160, 3), dtype=torch.uint8); labels = torch.randint(0, 1000, (3072,))
for name, loader in (("TensorDataset, 24 batches of 128 images + labels",
                      DataLoader(TensorDataset(imgs, labels), batch_size=128)),
                     ("map-style Dataset, Python crop + flip per sample, 24 batches of 64",
                      DataLoader(Crops(1536), batch_size=64))):
    p = fp.StreamPipeline(loss)
    ref = torch.cat([loss((x.cuda(), y.cuda())).cpu() for x, y in loader])
    got = torch.cat(list(p.imap(loader)))
    print(f"== {name}: max err {float((got - ref).abs().max()):.2e}; imap_stats read_ahead "
          f"{p.imap_stats['read_ahead']} ({p.imap_stats['read_ahead_why']})", flush=True)
    rounds({"naive": lambda: [loss((x.cuda(), y.cuda())).cpu() for x, y in loader],
            "loader alone": lambda: [b for b in loader],
            "imap(loader) (auto)": lambda: list(p.imap(loader)),
            "imap(loader, read_ahead=True)": lambda: list(p.imap(loader, read_ahead=True)),
            "imap(loader, read_ahead=False)": lambda: list(p.imap(loader, read_ahead=False))})
