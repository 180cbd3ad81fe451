"""p324: (1) what one launch costs the caller's thread by three paths: fullpipe's enqueue (drv.call ->
cuda.bindings cuLaunchKernelEx), cuda.bindings' function called directly, and libcuda's cuLaunchKernelEx through
ctypes on the config's own struct (getPtr); (2) operand() of w.T by .t().is_contiguous() against strides;
(3) the kernels cuBLAS runs for p320's losing shapes (torch.profiler names)."""
import ctypes, time
import torch
from fullpipe.kernels import gemm, hopper_gemm as hg
from fullpipe.kernels._operands import operand
from cuda.bindings import driver as d

x = torch.randn(200, 768, device="cuda", dtype=torch.bfloat16)
w = torch.randn(768, 768, device="cuda", dtype=torch.bfloat16)
out = torch.empty(200, 768, device="cuda", dtype=torch.bfloat16)
cs = torch.cuda.current_stream()
gemm(x, w.T, variant="hopper_persistent", stream=cs, out=out); torch.cuda.synchronize()
launch = [l for l in hg._LAUNCHES.values()][-1]
print("plan", launch.plan.kernel, launch.plan.grid, "sk", launch.plan.sk_tiles)


def per_call(fn, n=20000):
    fn(); torch.cuda.synchronize()
    best = 1e9
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(n // 3):
            fn()
        best = min(best, (time.perf_counter() - t) / (n // 3) * 1e6)
        torch.cuda.synchronize()
    return best


libcuda = ctypes.CDLL("libcuda.so.1")
fn = libcuda.cuLaunchKernelEx
fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
fn.restype = ctypes.c_int
cfg_ptr = launch.cfg.getPtr()
func = int(launch.kernel.handle)
params = ctypes.addressof(launch.params)
raw = d.cuLaunchKernelEx
h = launch.kernel.handle
rows = {
    "launch.enqueue()": launch.enqueue,
    "d.cuLaunchKernelEx direct": lambda: raw(launch.cfg, h, params, 0),
    "ctypes libcuda.cuLaunchKernelEx": lambda: fn(cfg_ptr, func, params, None),
    "torch.matmul(x, w.T, out=)": lambda: torch.matmul(x, w.T, out=out),
    "gemm(hopper_persistent, out=, cs)": lambda: gemm(x, w.T, variant="hopper_persistent", stream=cs, out=out),
    "operand(w.T) now": lambda: operand(w.T, "b", transposed_ok=True),
    "w.T": lambda: w.T,
    "w.T.t().is_contiguous()": lambda: w.T.t().is_contiguous(),
    "w.T.stride()": lambda: w.T.stride(),
    "x.is_contiguous()": lambda: x.is_contiguous(),
    "x.data_ptr()": lambda: x.data_ptr(),
    "tuple(x.shape)": lambda: tuple(x.shape),
    "x.get_device()": lambda: x.get_device(),
    "x.dtype": lambda: x.dtype,
    "cs.__cuda_stream__()": lambda: cs.__cuda_stream__(),
    "cs.cuda_stream": lambda: cs.cuda_stream,
}
assert fn(cfg_ptr, func, params, None) == 0
torch.cuda.synchronize()
for nm, f in rows.items():
    print(f"{nm:40} {per_call(f):7.2f} us", flush=True)
# the ctypes path computes the same product
out.fill_(float("nan")); fn(cfg_ptr, func, params, None); torch.cuda.synchronize()
ref = x.float() @ w.float().T
print("ctypes launch rel err", ((out.float() - ref).norm() / ref.norm()).item())

from torch.profiler import profile, ProfilerActivity
for m, n, k in [(200, 6144, 4096), (200, 4096, 14336), (200, 3072, 8192), (200, 4608, 3584), (200, 28672, 4096),
                (2048, 2304, 768), (6304, 768, 768), (6304, 768, 3072), (8192, 768, 3072), (2048, 4608, 3584)]:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    ww = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    torch.matmul(a, ww.T); torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            torch.matmul(a, ww.T)
        torch.cuda.synchronize()
    ev = [e for e in prof.events() if e.device_type.name == "CUDA"]
    names = {}
    for e in ev:
        names.setdefault(e.name, []).append(e.device_time)
    print(f"{m}x{n}x{k}: " + "; ".join(f"{nm[:150]} x{len(t)} {sum(t) / len(t):.1f}us" for nm, t in names.items()), flush=True)
