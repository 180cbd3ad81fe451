"""p343: what a stream-K gemm call's extra ~20 us of host time is made of (p342: 200 x 1008 x 2048 36 us a call with
stream-K, 10 us with whole tiles). Each piece alone in a loop of 3000 (perf_counter, host only)."""
import ctypes, struct, time
import torch
from fullpipe.cuda import driver as drv
from fullpipe.kernels import hopper_gemm as hg
from fullpipe.kernels._operands import operand

s = torch.cuda.current_stream()
h = s.cuda_stream


def us(fn, n=3000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) * 1e6 / n


ws = torch.empty(2097920, dtype=torch.uint8, device="cuda")
p = ws.data_ptr()
bound_memset = drv.bound("cuMemsetD32Async")
buf = ctypes.create_string_buffer(64)
at = ctypes.addressof(buf)


def alloc():
    t = torch.empty(2097920, dtype=torch.uint8, device="cuda")
    del t


rows = {"torch.empty(2 MiB) + del": alloc,
        "drv.call cuMemsetD32Async(768 B)": lambda: drv.call("cuMemsetD32Async", p, 0, 192, h),
        "bound cuMemsetD32Async(768 B)": lambda: bound_memset(p, 0, 192, h),
        "ws.zero_() (torch)": lambda: ws[:768].zero_(),
        "struct.pack + memmove": lambda: ctypes.memmove(at, struct.pack("<Q", p), 8)}
for nm, fn in rows.items():
    print(f"RESULT {nm:36s} {us(fn):6.2f} us", flush=True)
m, n, k = 200, 1008, 2048
a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
A, B = operand(a, "a"), operand(b, "b")
build = hg.default_build(m, n, k, 132, False)
for nm, skt in (("stream-K", None), ("whole", 0)):
    print(f"RESULT hg.run {nm:10s} {us(lambda: hg.run(A, B, 'persistent', c, s, build=build, sk_tiles=skt)):6.2f} us",
          flush=True)
launch = [v for v in hg._LAUNCHES.values() if v.workspace_at][0]
print(f"RESULT launch.enqueue(ws) alone {us(lambda: launch.enqueue(p)):6.2f} us", flush=True)
whole = [v for v in hg._LAUNCHES.values() if not v.workspace_at][0]
print(f"RESULT launch.enqueue() whole alone {us(lambda: whole.enqueue()):6.2f} us", flush=True)
