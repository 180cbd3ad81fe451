"""p114 (session 20): imap over sources that are not lists, against their bounds.

A. files on disk (np.load of 32 x 32 MiB .npy float32, page cache warm) -> bf16 MLP 1024-4096-1024, float32 out
   - source alone: iterate the files (np.load), nothing else
   - compute alone: f over device-resident batches
   - user loop: for x in files: y = f(torch.from_numpy(x).cuda()).cpu()
   - run_batches(list(files)): read everything, then one run (timed: read + run)
   - imap(files) read_ahead True / False; window default (64 MiB -> 12 batches) and 4 batches
B. DataLoader(num_workers=4, pin_memory=True, batch 256 of 224x224x3 uint8) -> resnet50 fp16 channels_last
   - loader alone; compute alone; user loop (non_blocking .cuda(), .cpu()); imap(loader)
Alternating rounds, medians. Prints a table.
"""
import os, sys, time, statistics, tempfile
import numpy as np
import torch
import fullpipe as fp

dev = torch.device("cuda")
torch.backends.cudnn.benchmark = False
R = int(sys.argv[1]) if len(sys.argv) > 1 else 5


def med(xs):
    return statistics.median(xs)


def rounds(cases, n):
    times = {k: [] for k in cases}
    keys = list(cases)
    for r in range(n):
        order = keys[r % len(keys):] + keys[:r % len(keys)]
        for k in order:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            cases[k]()
            torch.cuda.synchronize()
            times[k].append(time.perf_counter() - t0)
    return {k: med(v) * 1e3 for k, v in times.items()}, times


# ---------------------------------------------------------------- A: files
d = tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
ROWS, DIM, NFILES = 8192, 1024, 32
rng = np.random.default_rng(0)
paths = []
for i in range(NFILES):
    p = os.path.join(d, f"b{i}.npy")
    np.save(p, rng.standard_normal((ROWS, DIM), dtype=np.float32))
    paths.append(p)
with torch.device(dev):
    mlp = torch.nn.Sequential(torch.nn.Linear(DIM, 4096), torch.nn.GELU(), torch.nn.Linear(4096, DIM)).to(torch.bfloat16).eval()


@torch.inference_mode()
def f_mlp(x):
    return mlp(x.to(torch.bfloat16)).float()


def files():
    for p in paths:
        yield np.load(p)


dev_batches = [torch.from_numpy(np.load(p)).to(dev) for p in paths[:4]]
pool = fp.DevicePool(0, release_threshold="max")
pipe = fp.StreamPipeline(f_mlp, pool=pool)
sink = []


def source_alone():
    for x in files():
        sink.append(x.sum() if False else x.shape)
    sink.clear()


def compute_alone():
    for i in range(NFILES):
        f_mlp(dev_batches[i % 4])


def user_loop():
    for x in files():
        sink.append(f_mlp(torch.from_numpy(x).cuda()).cpu())
    sink.clear()


def listed():
    sink.extend(pipe.run_batches(list(files())))
    sink.clear()


def imap_(ra, w):
    def go():
        for y in pipe.imap(files(), read_ahead=ra, window=w):
            sink.append(y)
        sink.clear()
    return go


# correctness first
ref = [f_mlp(torch.from_numpy(np.load(p)).cuda()).cpu() for p in paths[:3]]
got = list(pipe.imap(files()))
for r_, g in zip(ref, got):
    torch.testing.assert_close(torch.from_numpy(g), r_, rtol=3e-2, atol=3e-2)
print("A correct; imap_stats", pipe.imap_stats, flush=True)
for w in (list(files()) for _ in range(1)):
    pass
casesA = {"source alone": source_alone, "compute alone": compute_alone, "user loop": user_loop,
          "run_batches(list)": listed, "imap": imap_(True, "64MiB"), "imap no read-ahead": imap_(False, "64MiB"),
          "imap window=4": imap_(True, 4)}
for k, c in casesA.items():  # warm
    c()
medA, allA = rounds(casesA, R)
stA = {}
for y in pipe.imap(files()):
    pass
stA = dict(pipe.imap_stats)
pipe.close()
GB = NFILES * ROWS * DIM * 4 / 1e9
print(f"\nA. {NFILES} files x {ROWS*DIM*4>>20} MiB float32 (np.load from {d}) -> bf16 MLP, {GB:.2f} GB in, same out; median of {R} rounds, ms")
bound = max(medA["source alone"], medA["compute alone"])
for k, v in medA.items():
    print(f"  {k:22s} {v:8.1f} ms   bound/this {bound / v:5.2f}   spread {min(allA[k])*1e3:.1f}-{max(allA[k])*1e3:.1f}")
print("  imap_stats:", {k: (round(v, 1) if isinstance(v, float) else v) for k, v in stA.items()})
import shutil
shutil.rmtree(d, ignore_errors=True)

# ---------------------------------------------------------------- C: a fast source (views of an array in memory)
big = np.random.default_rng(1).standard_normal((NFILES * ROWS, DIM), dtype=np.float32)
pipeC = fp.StreamPipeline(f_mlp, pool=pool)


def views():
    for i in range(0, len(big), ROWS // 4):
        yield big[i:i + ROWS // 4]


casesC = {"run(x)": lambda: sink.append(pipeC.run(big)) or sink.clear(),
          "run_batches(list)": lambda: sink.extend(pipeC.run_batches(list(views()))) or sink.clear(),
          "imap": lambda: [sink.append(y) for y in pipeC.imap(views())] and sink.clear(),
          "imap no read-ahead": lambda: [sink.append(y) for y in pipeC.imap(views(), read_ahead=False)] and sink.clear()}
for k, c in casesC.items():
    c()
medC, allC = rounds(casesC, R)
for y in pipeC.imap(views()):
    pass
stC = dict(pipeC.imap_stats)
print(f"\nC. views of one pageable {big.nbytes/1e9:.2f} GB float32 array, {ROWS//4} rows (8 MiB) each -> bf16 MLP; median of {R} rounds, ms")
bound = medC["run(x)"]
for k, v in medC.items():
    print(f"  {k:22s} {v:8.1f} ms   run(x)/this {bound / v:5.2f}   spread {min(allC[k])*1e3:.1f}-{max(allC[k])*1e3:.1f}")
print("  imap_stats:", {k: (round(v, 1) if isinstance(v, float) else v) for k, v in stC.items()})
pipeC.close()
del big

# ---------------------------------------------------------------- B: DataLoader
import torchvision


class Images(torch.utils.data.Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(0)
        self.base = torch.randint(0, 256, (64, 224, 224, 3), dtype=torch.uint8, generator=g)
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.base[i % 64]


with torch.device(dev):
    net = torchvision.models.resnet50().to(torch.float16).to(memory_format=torch.channels_last).eval()


@torch.inference_mode()
def f_net(x):  # NHWC uint8 -> logits float32
    h = x.permute(0, 3, 1, 2).to(torch.float16).div_(255)
    return net(h.contiguous(memory_format=torch.channels_last)).float()


NIMG, BS = 12288, 256
loader = torch.utils.data.DataLoader(Images(NIMG), batch_size=BS, num_workers=4, pin_memory=True,
                                     persistent_workers=True, prefetch_factor=4)
devimgs = next(iter(loader)).to(dev)
pipeB = fp.StreamPipeline(f_net, pool=pool)


def loader_alone():
    for x in loader:
        pass


def computeB():
    for _ in range(NIMG // BS):
        f_net(devimgs)


def userB():
    for x in loader:
        sink.append(f_net(x.cuda(non_blocking=True)).cpu())
    sink.clear()


def imapB(w):
    def go():
        for y in pipeB.imap(iter(loader), window=w):
            sink.append(y)
        sink.clear()
    return go


refB = f_net(devimgs).cpu()
gotB = next(iter(pipeB.imap(iter(loader))))
torch.testing.assert_close(gotB, refB, rtol=2e-2, atol=2e-2)
print("B correct", flush=True)
casesB = {"loader alone": loader_alone, "compute alone": computeB, "user loop": userB, "imap": imapB("64MiB"),
          "imap window=4": imapB(4)}
for k, c in casesB.items():
    c()
medB, allB = rounds(casesB, R)
for y in pipeB.imap(iter(loader)):
    pass
stB = dict(pipeB.imap_stats)
print(f"\nB. DataLoader(4 workers, pin_memory) {NIMG} images 224x224x3 uint8, batch {BS} -> resnet50 fp16; median of {R} rounds, ms")
bound = max(medB["loader alone"], medB["compute alone"])
for k, v in medB.items():
    print(f"  {k:22s} {v:8.1f} ms   bound/this {bound / v:5.2f}   spread {min(allB[k])*1e3:.1f}-{max(allB[k])*1e3:.1f}")
print("  imap_stats:", {k: (round(v, 1) if isinstance(v, float) else v) for k, v in stB.items()})
print("  last window stats:", str(pipeB.stats).splitlines()[:6])
pipeB.close()
