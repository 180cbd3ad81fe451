"""p171: host time of a stream-K gemm_hopper call, by function."""
import cProfile, io, pstats, time
import torch
from fullpipe.kernels import hopper_gemm as hg
a = torch.randn(512, 4096, device="cuda", dtype=torch.bfloat16); b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
out = torch.empty(512, 4096, device="cuda", dtype=torch.bfloat16)
for label, kw in (("stream-K", {}), ("whole", {"_sk_tiles": 0})):
    hg.gemm_hopper(a, b, out=out, **kw); torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(500):
        hg.gemm_hopper(a, b, out=out, **kw)
    print(label, f"{(time.perf_counter() - t0) / 500 * 1e6:.1f} us per call", flush=True)
    torch.cuda.synchronize()
pr = cProfile.Profile(); pr.enable()
for _ in range(1000):
    hg.gemm_hopper(a, b, out=out)
pr.disable(); torch.cuda.synchronize()
st = io.StringIO(); pstats.Stats(pr, stream=st).sort_stats("tottime").print_stats(14); print(st.getvalue()[:3500])
