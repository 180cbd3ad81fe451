"""p242 (session 36): cheaper launches?

A. cuLaunchKernel with the CUkernel handle cuda.core gives (the driver finds the
   context's function per launch?) against the CUfunction of cuKernelGetFunction.
B. A whole-run graph (96 batches x 8 MiB, 3 lanes: H2D, kernel, D2H) instantiated
   plainly and for device launch (CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH): the
   host's launch cost, the run's wall time, the output; kernel nodes from either handle.
"""
import ctypes
import statistics
import time

import numpy as np

from fullpipe.cuda import driver as drv
from fullpipe.cuda.device import Device
from fullpipe.cuda.hotpath import HotPath, PackedArgs, handle_int
from fullpipe.cuda.memory import pinned_empty
from fullpipe.cuda.pool import DevicePool
from fullpipe.cuda.streams import create_stream
from fullpipe.pipeline.workload import BLOCK, MixKernel, reference

dev = Device(0)
dev.set_current()
d = drv.driver()
hot = HotPath()
CHUNK = 8 << 20
n = CHUNK // 4
B = 96
x = pinned_empty(B * n, np.uint32)
y = pinned_empty(B * n, np.uint32)
x[:] = np.random.default_rng(1).integers(0, 2**32, x.size, dtype=np.uint32)
pool = DevicePool(dev, release_threshold="max")
kernel = MixKernel(dev, rounds=2)
med = statistics.median
P = lambda *a: print(*a, flush=True)  # noqa: E731

streams = [create_stream(dev) for _ in range(3)]
hs = [handle_int(s) for s in streams]
lanes = [hot.alloc_from_pool(2 * CHUNK, handle_int(pool.handle), h) for h in hs]
for s in streams:
    s.sync()
args = PackedArgs([ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int32])
k_kernel = handle_int(kernel.kernel.handle)
k_func = handle_int(drv.call("cuKernelGetFunction", kernel.kernel.handle))
grid = kernel.grid_for(n)
P(f"kernel handle {type(kernel.kernel.handle).__name__}, function {k_func:#x}")

# ---------------------------------------------------------------- A. launch cost by handle
for rep in range(2):
    for label, kh in (("CUkernel", k_kernel), ("CUfunction", k_func)):
        t, t_only = [], []
        for _ in range(7):
            for s in streams:
                s.sync()
            t0 = time.perf_counter()
            for i in range(B):
                h, p = hs[i % 3], lanes[i % 3]
                args.set(p, p + CHUNK, n, 0)
                hot.launch(kh, grid, BLOCK, args, h)
            t.append((time.perf_counter() - t0) * 1e6 / B)
            for s in streams:
                s.sync()
            t0 = time.perf_counter()
            for i in range(B):
                hot.launch(kh, grid, BLOCK, args, hs[i % 3])
            t_only.append((time.perf_counter() - t0) * 1e6 / B)
        P(f"[A{rep}] {label:10s}: set+launch {med(t):.2f} us, launch alone {med(t_only):.2f} us")
for s in streams:
    s.sync()

# ---------------------------------------------------------------- B. whole-run graph, two ways
fork = drv.call("cuEventCreate", 0)
joins = [drv.call("cuEventCreate", 0) for _ in range(3)]


def capture(kh, kind="all"):
    drv.call("cuStreamBeginCapture", streams[0].handle, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
    drv.call("cuEventRecord", fork, streams[0].handle)
    for k in range(1, 3):
        drv.call("cuStreamWaitEvent", streams[k].handle, fork, 0)
    xs, ys = x.ctypes.data, y.ctypes.data
    for i in range(B):
        h, p = hs[i % 3], lanes[i % 3]
        if kind != "kernels":
            hot.memcpy_htod(p, xs + i * CHUNK, CHUNK, h)
        if kind != "copies":
            args.set(p, p + CHUNK, n, kernel.rounds)
            hot.launch(kh, grid, BLOCK, args, h)
        if kind != "kernels":
            hot.memcpy_dtoh(ys + i * CHUNK, p + CHUNK, CHUNK, h)
    for k in range(1, 3):
        drv.call("cuEventRecord", joins[k], streams[k].handle)
        drv.call("cuStreamWaitEvent", streams[0].handle, joins[k], 0)
    return drv.call("cuStreamEndCapture", streams[0].handle)


ref = None
for kind in ("all", "copies"):
    for label, kh in (("CUkernel", k_kernel), ("CUfunction", k_func)):
        if kind == "copies" and label == "CUfunction":
            continue
        for flags, fname in ((0, "plain"), (4, "device-launch"), (1, "auto-free")):
            graph = capture(kh, kind)
            try:
                exe = drv.call("cuGraphInstantiate", graph, flags)
            except Exception as exc:  # noqa: BLE001
                P(f"[B] {kind} {label} {fname}: instantiate failed: {exc}")
                drv.call("cuGraphDestroy", graph)
                continue
            try:
                if flags == 4:
                    drv.call("cuGraphUpload", exe, streams[0].handle)
                    drv.call("cuStreamSynchronize", streams[0].handle)
                eh = handle_int(exe)
                launch, wall = [], []
                for _ in range(9):
                    y[:] = 0
                    drv.call("cuStreamSynchronize", streams[0].handle)
                    t0 = time.perf_counter()
                    hot.graph_launch(eh, hs[0])
                    t1 = time.perf_counter()
                    drv.call("cuStreamSynchronize", streams[0].handle)
                    t2 = time.perf_counter()
                    launch.append(t1 - t0)
                    wall.append(t2 - t0)
                if kind == "all":
                    if ref is None:
                        ref = y.copy()
                    ok = np.array_equal(ref, y)
                else:
                    ok = np.array_equal(y, x) is False  # copies only: y holds device garbage, not checked
                P(f"[B] {kind:6s} {label:10s} {fname:13s}: launch {med(launch)*1e6:7.1f} us "
                  f"({med(launch)*1e6/B:.2f}/batch), wall {med(wall)*1e3:.2f} ms, same output as first: {ok}")
            except Exception as exc:  # noqa: BLE001
                P(f"[B] {kind} {label} {fname}: launch failed: {exc}")
            drv.call("cuGraphExecDestroy", exe)
            drv.call("cuGraphDestroy", graph)
# the reference: the kernel's output for the first batch computed on the host
if ref is not None:
    P("batch 0 equals reference():", np.array_equal(ref[:n], reference(x[:n], kernel.rounds)))
for p, h in zip(lanes, hs):
    hot.free_async(p, h)
for s in streams:
    s.sync()
P("done")
