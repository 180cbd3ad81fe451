"""p290: why p289's defaults ran short of compute alone. (1) the 2-layer GRU list (0.72x): fullpipe's
default against compute_threads=1 (pipelined) and 3 (threads), compute alone on one stream and on three
streams in turn, and the GRU call's host time; the trial's readings. (2) resnet18 at 112 px (0.94x) and the
conv1d stack (0.92x): chunk='auto' against fixed chunks. Alternating rounds, medians."""
import statistics, sys, time
import numpy as np
import torch
import fullpipe as fp

torch.manual_seed(289)
rng = np.random.default_rng(289)
dev = torch.device("cuda")
ONLY = sys.argv[1:]


def timed(fn):
    torch.cuda.synchronize(); t = time.perf_counter(); fn(); torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3


def rounds(fns, n=5, warm=2):
    for fn in fns.values():
        for _ in range(warm):
            fn()
    ts = {k: [] for k in fns}
    for r in range(n):
        for k in (list(fns) if r % 2 else list(fns)[::-1]):
            ts[k].append(timed(fns[k]))
    return {k: statistics.median(v) for k, v in ts.items()}


def alone(f, xs, streams=1):
    dx = [x.to(dev) for x in xs]
    ss = [torch.cuda.Stream() for _ in range(streams)]

    def run():
        for i, x in enumerate(dx):
            with torch.cuda.stream(ss[i % streams]):
                f(x)
        for s in ss:
            s.synchronize()
    return run


if not ONLY or "gru" in ONLY:
    gru = torch.nn.GRU(128, 512, 2, batch_first=True).to(dev).eval()

    def gru_last(x):
        return gru(x)[1][-1]

    xs = [torch.randn(int(rng.integers(16, 129)), int(rng.integers(20, 200)), 128) for _ in range(48)]
    print("GRU list:", len(xs), "batches,", sum(x.nbytes for x in xs) / 2**20, "MiB", flush=True)
    with torch.inference_mode():
        dx = [x.to(dev) for x in xs]
        torch.cuda.synchronize()
        host = []
        for _ in range(3):
            t = time.perf_counter()
            for x in dx:
                gru_last(x)
            host.append((time.perf_counter() - t) * 1e3)
            torch.cuda.synchronize()
        print(f"GRU calls' host time for the list (no sync between): {min(host):.1f} ms", flush=True)
        pipes = {"default": fp.StreamPipeline(gru_last), "threads=1": fp.StreamPipeline(gru_last, compute_threads=1),
                 "threads=3": fp.StreamPipeline(gru_last, compute_threads=3)}
        for name, p in pipes.items():
            for i in range(14):
                p.run_batches(xs)
                if name == "default":
                    print("  default run", i, p.stats.list_path, f"{p.stats.wall_ms:.1f} ms", flush=True)
        fns = {name: (lambda p=p: p.run_batches(xs)) for name, p in pipes.items()}
        fns["alone 1 stream"] = alone(gru_last, xs, 1)
        fns["alone 3 streams"] = alone(gru_last, xs, 3)
        fns["naive"] = lambda: [gru_last(x.to(dev)).cpu() for x in xs]
        for k, v in rounds(fns).items():
            print(f"RESULT gru {k:16s} {v:8.2f} ms", flush=True)
        for name, p in pipes.items():
            p.run_batches(xs)
            st = p.stats
            print(f"  {name}: list_path {st.list_path}; threads {st.compute_threads}; host "
                  f"{ {k: round(v, 1) for k, v in st.host_us.items()} }; staging {st.staging}", flush=True)
            p.close()

import torchvision  # noqa: E402

mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1) * 255
std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1) * 255


def sweep(name, f, x, chunks):
    with torch.inference_mode():
        pipes = {"auto": fp.StreamPipeline(f)}
        pipes.update({c: fp.StreamPipeline(f, chunk=c) for c in chunks})
        for p in pipes.values():
            p.run(x)
        fns = {f"chunk {k}": (lambda p=p: p.run(x)) for k, p in pipes.items()}
        fns["alone 256 rows, 1 stream"] = alone(f, list(x.split(256)), 1)
        fns["alone 256 rows, 3 streams"] = alone(f, list(x.split(256)), 3)
        rows = pipes["auto"].stats.chunk["rows"]
        fns[f"alone {rows} rows, 1 stream"] = alone(f, list(x.split(rows)), 1)
        for k, v in rounds(fns).items():
            print(f"RESULT {name} {k:28s} {v:8.2f} ms", flush=True)
        st = pipes["auto"].stats
        print(f"  auto: {st.chunk.get('reason')}\n  host {st.host_us}; staging {st.staging}", flush=True)
        for p in pipes.values():
            p.close()


if not ONLY or "r18" in ONLY:
    r18 = torchvision.models.resnet18().to(dev).half().to(memory_format=torch.channels_last).eval()

    def r18f(img):
        return r18(((img.permute(0, 3, 1, 2).float() - mean) / std).half()).float()

    sweep("resnet18-112", r18f, torch.randint(0, 256, (8192, 112, 112, 3), dtype=torch.uint8), ["8MiB", "16MiB", "32MiB"])

if not ONLY or "conv1d" in ONLY:
    conv = torch.nn.Sequential(torch.nn.Conv1d(1, 32, 9, padding=4), torch.nn.GELU(),
                               torch.nn.Conv1d(32, 8, 9, padding=4), torch.nn.GELU(),
                               torch.nn.Conv1d(8, 1, 9, padding=4, stride=4)).to(dev).half().eval()

    def audio(x):
        return conv(x.half().unsqueeze(1)).squeeze(1).float()

    sweep("conv1d", audio, torch.randn(16384, 16384), ["8MiB", "16MiB", "64MiB"])
