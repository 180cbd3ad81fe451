"""run_batches of image batches of all-different sizes through a model whose new batch shapes
cost seconds (torchvision mobilenet_v3_large, fp16 channels_last, 160 px): naive loop vs
fullpipe's defaults vs no padding, each in a fresh process (argv[1] = naive|fullpipe|nopad).
No size repeats within a run, so a shape is never called twice in the first run."""
import sys, time
import numpy as np, torch, torchvision
import fullpipe as fp
t00 = time.perf_counter()
m = torchvision.models.mobilenet_v3_large().cuda().half().to(memory_format=torch.channels_last).eval()
sizes = [32, 20, 24, 12, 30, 16, 40, 28, 18, 36, 26, 14]
rng = np.random.default_rng(3)
batches = [rng.integers(0, 255, size=(n, 3, 160, 160), dtype=np.uint8) for n in sizes]
calls = []
@torch.inference_mode()
def f(u8):
    calls.append(u8.shape[0])
    return m((u8.half() / 255).contiguous(memory_format=torch.channels_last)).float()
def naive():
    with torch.inference_mode():
        return [f(torch.from_numpy(b).cuda()).cpu().numpy() for b in batches]
ref = None
runs = []
if sys.argv[1] == "naive":
    for r in range(2):
        t0 = time.perf_counter(); ys = naive(); runs.append(time.perf_counter() - t0)
else:
    pipe = fp.StreamPipeline(f, pad_shapes="auto" if sys.argv[1] == "fullpipe" else False)
    for r in range(2):
        t0 = time.perf_counter(); ys = pipe.run_batches(batches); torch.cuda.synchronize(); runs.append(time.perf_counter() - t0)
        print("  run", r, "padded", pipe.stats.padded, "calls at", calls[-len(sizes):])
    with torch.inference_mode():
        ref = [f(torch.from_numpy(b).cuda()).cpu().numpy() for b in batches]
    err = max(float(np.abs(a - b).max()) for a, b in zip(ys, ref))
    print(f"  max abs err vs eager {err:.3g}")
print(f"{sys.argv[1]:9s}: runs " + ", ".join(f"{r*1e3:.0f}" for r in runs) + f" ms; distinct shapes called {len(set(calls))}; process {time.perf_counter()-t00:.1f} s")
