"""p369: why workload A's call takes longer inside fullpipe than in compute alone: the MLP's Python call over the 200
batches (host-bound) on one stream against three streams in turn, on tensors of their own against views of one block,
and with torch.cuda.set_stream per call as fullpipe's adapter does."""
import statistics, time
import numpy as np
import torch

dev = torch.device("cuda")
rng = np.random.default_rng(0)
mlp = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.SiLU(), torch.nn.Linear(2048, 2048), torch.nn.SiLU(),
                          torch.nn.Linear(2048, 256)).to(dev, torch.bfloat16).eval()


@torch.inference_mode()
def f(x):
    return mlp(x.to(torch.bfloat16)).float()


xs = [rng.standard_normal((int(r), 512), dtype=np.float32) for r in rng.integers(64, 2048, 200)]
own = [torch.from_numpy(x).to(dev) for x in xs]
block = torch.cat([t.reshape(-1) for t in own])
offs = np.cumsum([0] + [t.numel() for t in own])
views = [block[offs[i]:offs[i + 1]].view(own[i].shape) for i in range(len(own))]
streams = [torch.cuda.Stream() for _ in range(3)]
main = torch.cuda.current_stream()


def run(inputs, nstreams, set_stream):
    keep = []
    t = time.perf_counter()
    for i, x in enumerate(inputs):
        s = streams[i % nstreams]
        if set_stream:
            torch.cuda.set_stream(s)
            keep.append(f(x))
        else:
            with torch.cuda.stream(s):
                keep.append(f(x))
    host = time.perf_counter() - t
    torch.cuda.set_stream(main)
    torch.cuda.synchronize()
    return host * 1e6 / len(inputs), (time.perf_counter() - t) * 1e6 / len(inputs)


cases = {"1 stream, own tensors": (own, 1, False), "3 streams, own tensors": (own, 3, False),
         "1 stream, views of a block": (views, 1, False), "3 streams, views": (views, 3, False),
         "3 streams, views, set_stream": (views, 3, True)}
for _ in range(3):
    for c in cases.values():
        run(*c)
res = {k: [] for k in cases}
for _ in range(7):
    for k, c in cases.items():
        res[k].append(run(*c))
for k, v in res.items():
    print(f"RESULT {k:32s} host {statistics.median(h for h, _ in v):7.1f} us/call, wall {statistics.median(w for _, w in v):7.1f} us/batch")
