"""p173: a new user's loop over random shapes (8..3000, multiples of 8), both dtypes, on a side stream,
outputs allocated by gemm; every result against torch.matmul in float32."""
import random, time
import torch
from fullpipe.kernels import gemm
from fullpipe.kernels import hopper_gemm as hg
rnd = random.Random(7)
side = torch.cuda.Stream()
bad, sk = 0, 0
t0 = time.perf_counter()
for i in range(120):
    m, n, k = (rnd.randrange(8, 3000, 8) for _ in range(3))
    dt = rnd.choice([torch.bfloat16, torch.float16])
    a = torch.randn(m, k, device="cuda", dtype=dt); b = torch.randn(k, n, device="cuda", dtype=dt)
    s = side if i % 2 else torch.cuda.current_stream()
    c = gemm(a, b, variant="hopper_persistent", stream=s)
    s.synchronize()
    ref = a.float() @ b.float()
    err = float((c.float() - ref).norm() / ref.norm())
    p = hg.plan("persistent", m, n, k, str(dt).split(".")[1], max_clusters=66)
    sk += p.sk_tiles > 0
    if err > 1e-2 or c.shape != (m, n) or c.dtype != dt:
        bad += 1
        print("BAD", m, n, k, dt, err, flush=True)
print(f"120 random shapes: {bad} wrong, {sk} with stream-K, {time.perf_counter() - t0:.1f} s")
