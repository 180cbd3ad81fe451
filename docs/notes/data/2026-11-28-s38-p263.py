"""p263: ViT-B/16 fp16 over 512 NHWC uint8 images in a fresh process, the pipeline first (as p255 ran it): each run's
time, chunk and stats; then the naive whole batch. argv[1]: "eager" sets CUDA_MODULE_LOADING=EAGER first."""
import os, sys
if len(sys.argv) > 1 and sys.argv[1] == "eager":
    os.environ["CUDA_MODULE_LOADING"] = "EAGER"
import time
import numpy as np
import torch
import torchvision
import fullpipe as fp

torch.manual_seed(0)
m = torchvision.models.vit_b_16(weights=None)
m.heads = torch.nn.Identity()
m = m.cuda().half().eval()
mean = torch.tensor([0.485, 0.456, 0.406], device="cuda", dtype=torch.float16).view(1, 3, 1, 1)
std = torch.tensor([0.229, 0.224, 0.225], device="cuda", dtype=torch.float16).view(1, 3, 1, 1)


@torch.inference_mode()
def f(u8):
    x = u8.permute(0, 3, 1, 2).half().div(255).sub(mean).div(std)
    return m(x).float()


def timed(fn):
    torch.cuda.synchronize(); t = time.perf_counter(); r = fn(); torch.cuda.synchronize()
    return r, time.perf_counter() - t


x = np.random.default_rng(1).integers(0, 256, size=(512, 224, 224, 3), dtype=np.uint8)
xt = torch.from_numpy(x)
with fp.StreamPipeline(f) as pipe:
    for i in range(5):
        _, t = timed(lambda: pipe.run(x))
        st = pipe.stats
        print(f"run {i}: {t * 1e3:.1f} ms; chunk {(st.chunk or {}).get('rows')} rows; new shape "
              f"{(st.chunk or {}).get('new_shape_ms', 0):.1f} ms; staging {st.staging}")
        if i in (0, 1):
            print(st)
        print(f"padded {st.padded}")
for _ in range(2):
    _, t = timed(lambda: f(xt.cuda()).cpu())
    print(f"naive whole batch: {t * 1e3:.1f} ms")
