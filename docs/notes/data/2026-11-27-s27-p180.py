"""p180: a new user's loop over random shapes through gemm(variant="hopper") (the default choice: the skinny
kernel for few rows, else the persistent rung with its build), both dtypes, half on a side stream, outputs
allocated by gemm; M from 1..160 for half the shapes (decode-like), 8..3000 for the others; N, K multiples of 8.
Every result against torch.matmul in float32."""
import random, time
import torch
from fullpipe.kernels import gemm
from fullpipe.kernels import hopper_gemm as hg
from fullpipe.kernels import skinny_gemm as sk
rnd = random.Random(27)
side = torch.cuda.Stream()
sms = torch.cuda.get_device_properties(0).multi_processor_count
bad, kinds = 0, {}
t0 = time.perf_counter()
for i in range(200):
    m = rnd.randrange(1, 161) if i % 2 else rnd.randrange(8, 3000)
    n, k = rnd.randrange(8, 6000, 8), rnd.randrange(8, 6000, 8)
    dt = rnd.choice([torch.bfloat16, torch.float16])
    a = torch.randn(m, k, device="cuda", dtype=dt); b = torch.randn(k, n, device="cuda", dtype=dt)
    s = side if i % 3 == 0 else torch.cuda.current_stream()
    c = gemm(a, b, variant="hopper", stream=s)
    s.synchronize()
    ref = a.float() @ b.float()
    err = float((c.float() - ref).norm() / ref.norm())
    v = "skinny" if sk.preferred(m, n, sms) else "persistent-" + hg.default_build(m, n, sms).label
    kinds[v] = kinds.get(v, 0) + 1
    if err > 1e-2 or c.shape != (m, n) or c.dtype != dt:
        bad += 1
        print("BAD", m, n, k, dt, v, err, flush=True)
print(f"200 random shapes: {bad} wrong; kernels {kinds}; {time.perf_counter() - t0:.1f} s")
