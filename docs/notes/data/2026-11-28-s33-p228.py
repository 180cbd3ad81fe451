"""Session 33: run_batches([x]) of one small batch (the last output straight in) against the
naive call; run in alternating processes with the code before and after (PYTHONPATH). Also
checks imap's read_ahead choice on a real DataLoader's iterator."""
import statistics, sys, time
import torch
import fullpipe as fp
from fullpipe.pipeline import imap as W

f = lambda t: t * 2
x = torch.randn(32, 512)  # 64 KiB
pipe = fp.StreamPipeline(f)
for _ in range(20):
    pipe.run_batches([x]); f(x.cuda()).cpu()
res = {"run_batches([x])": [], "naive": [], "run(x)": []}
for rd in range(7):
    for k in res:
        t0 = time.perf_counter()
        for _ in range(200):
            if k == "naive":
                f(x.cuda()).cpu()
            elif k == "run(x)":
                pipe.run(x)
            else:
                pipe.run_batches([x])
        res[k].append((time.perf_counter() - t0) / 200 * 1e6)
y = pipe.run_batches([x])[0]
assert torch.equal(y, x * 2) and not y.is_pinned()
med = {k: statistics.median(v) for k, v in res.items()}
print(sys.argv[1], " ".join(f"{k} {v:.1f} us" for k, v in med.items()),
      f"| run_batches([x]) x naive time {med['run_batches([x])'] / med['naive']:.2f}, run(x) {med['run(x)'] / med['naive']:.2f}")
if sys.argv[1] == "new":
    from torch.utils.data import DataLoader, TensorDataset
    dl = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=8)
    print("iter(loader):", W.choose_read_ahead(iter(dl), "auto"), "| loader:", W.choose_read_ahead(dl, "auto"),
          "| workers=2 iter:", W.choose_read_ahead(iter(DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=8, num_workers=2)), "auto"))
