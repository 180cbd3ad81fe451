"""p411 (session 60): the host time of one gemm(x, w.T, variant="hopper") call (u7: 35-100 us eager where
F.linear took 20-30): per call, no sync inside the loop, against F.linear; then cProfile of the slowest form."""
import cProfile, pstats, time, io
import torch, torch.nn.functional as F
from fullpipe.kernels import gemm

torch.manual_seed(0)
st = torch.cuda.current_stream()


def host_us(fn, calls=2000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - t) / calls * 1e6
    torch.cuda.synchronize()
    return host


x2 = torch.randn(77, 2048, device="cuda", dtype=torch.bfloat16)
x3 = torch.randn(8, 197, 1024, device="cuda", dtype=torch.bfloat16)
w2 = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
w3 = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
out2 = torch.empty(77, 2048, device="cuda", dtype=torch.bfloat16)
forms = {
    "2-D out=None": (lambda: gemm(x2, w2.T, variant="hopper", stream=st), lambda: F.linear(x2, w2)),
    "2-D out given": (lambda: gemm(x2, w2.T, variant="hopper", stream=st, out=out2), lambda: torch.matmul(x2, w2.T, out=out2)),
    "2-D persistent": (lambda: gemm(x2, w2.T, variant="hopper_persistent", stream=st), lambda: F.linear(x2, w2)),
    "3-D out=None": (lambda: gemm(x3, w3.T, variant="hopper", stream=st), lambda: F.linear(x3, w3)),
    "3-D, current stream each call": (lambda: gemm(x3, w3.T, variant="hopper", stream=torch.cuda.current_stream()),
                                      lambda: F.linear(x3, w3)),
}
for name, (ours, theirs) in forms.items():
    print(f"{name:32s} gemm {host_us(ours):6.1f} us a call, torch {host_us(theirs):6.1f} us (host time)", flush=True)
for name in ("2-D out=None", "3-D out=None"):
    fn = forms[name][0]
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(2000):
        fn()
    pr.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(28)
    print(f"---- {name}: cProfile, 2000 calls, by own time\n" + s.getvalue()[-6000:], flush=True)
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(30)
    print(f"---- {name}: by cumulative time\n" + s.getvalue()[-6500:], flush=True)
