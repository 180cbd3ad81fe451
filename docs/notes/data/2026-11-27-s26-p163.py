"""p163: which cuBLAS kernels torch.matmul runs (bf16) at a few shapes."""
import torch
from torch.profiler import profile, ProfilerActivity
dev = torch.device("cuda")
for m, n, k in [(8192, 8192, 8192), (4096, 4096, 4096), (3072, 3072, 3072), (512, 4096, 4096), (4096, 11008, 4096), (1024, 1024, 1024)]:
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16); b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
    torch.matmul(a, b); torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        torch.matmul(a, b); torch.cuda.synchronize()
    names = sorted({e.name for e in p.events() if e.device_type.name == "CUDA"})
    print(m, n, k, names, flush=True)
