"""p262: torchvision ViT-B/16 fp16 over 512 NHWC uint8 images (p255's one SLOW scenario): fullpipe's runs against
the naive whole batch and the naive loop over the same chunks; stats of every run."""
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
for _ in range(2):
    _, t = timed(lambda: f(xt.cuda()).cpu())
print(f"naive whole batch: {t * 1e3:.1f} ms")
for rows in (144, 80, 64, 128):
    for _ in range(2):
        _, t = timed(lambda: [f(xt[i:i + rows].cuda()).cpu() for i in range(0, 512, rows)])
    print(f"naive loop of {rows}-row chunks: {t * 1e3:.1f} ms")
for kw in ({}, {"chunk": 64}, {"chunk": 128}, {"compute_threads": 1}):
    with fp.StreamPipeline(f, **kw) as pipe:
        for i in range(4):
            _, t = timed(lambda: pipe.run(x))
            st = pipe.stats
            print(f"{kw} run {i}: {t * 1e3:.1f} ms; chunk {(st.chunk or {}).get('rows')} rows; "
                  f"path {(st.list_path or {}).get('path') if hasattr(st, 'list_path') else ''}")
        print(st)
        print()
