"""A new user's first run of a torchvision model whose cuDNN plans cost seconds per new batch shape:
naive loop vs fullpipe, each in a fresh process (argv[1] = naive|fullpipe)."""
import sys, time
import numpy as np, torch, torchvision
import fullpipe as fp
t00 = time.perf_counter()
name = sys.argv[2] if len(sys.argv) > 2 else "mobilenet_v3_large"
m = getattr(torchvision.models, name)().cuda().half().to(memory_format=torch.channels_last).eval()
x = np.random.default_rng(2).integers(0, 255, size=(8192, 3, 160, 160), dtype=np.uint8)
@torch.inference_mode()
def f(u8): return m((u8.half() / 255).contiguous(memory_format=torch.channels_last)).float()
def naive(chunk=256):
    with torch.inference_mode():
        return torch.cat([f(torch.from_numpy(x[i:i+chunk]).cuda()).cpu() for i in range(0, len(x), chunk)]).numpy()
runs = []
if sys.argv[1] == "naive":
    for r in range(3):
        t0 = time.perf_counter(); naive(); torch.cuda.synchronize(); runs.append(time.perf_counter() - t0)
else:
    pipe = fp.StreamPipeline(f)
    for r in range(3):
        t0 = time.perf_counter(); pipe.run(x); torch.cuda.synchronize(); runs.append(time.perf_counter() - t0)
        print("  run", r, "chunk", pipe.stats.chunk, "shapes", pipe.stats.input_shapes)
print(f"{sys.argv[1]:9s} {name}: runs " + ", ".join(f"{r*1e3:.0f}" for r in runs) + f" ms; process {time.perf_counter()-t00:.1f} s")
