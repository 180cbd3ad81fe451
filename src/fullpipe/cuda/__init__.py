"""The thin runtime layer over cuda.core: one concept per module.

- device.py    device facts, the current context (ensure_current: any thread)
- streams.py   explicit non-blocking streams; the default streams by name
- events.py    timing and non-timing events, cross-stream waits
- hostfn.py    host functions on a stream, with the no-CUDA-inside rule enforced
- memory.py    pinned host arrays, device arrays, async copies
- pinned_pool.py  reusable pinned host buffers with a cap, stats and trim
- pin_cache.py  pageable arrays that come back, page-locked where they are (a pin-down cache)
- pool.py      fullpipe's own stream-ordered memory pool (never the default pool)
- interop.py   PyTorch/CuPy at the edges: host views, streams, device-array views
- compiler.py  NVRTC -> cubin, cached on disk
- nvrtc_worker.py  NVRTC in worker processes: a crash inside it is a retry, not the caller's end
- launch.py    launches with clusters, cooperative groups, >48 KiB shared memory
- sass.py      disassembly, to check the instructions a technique is about
- driver.py    checked driver calls raising fullpipe.CudaError
"""

from .compiler import compile_file, compile_package_kernel, compile_source
from .device import Device, DeviceFacts, ensure_current
from .events import create_event, elapsed_ms, join, record, wait
from .hostfn import launch_host_func
from .launch import launch
from .interop import HostKind, as_cupy, as_torch, cupy_stream, host_view, like_input, torch_stream
from .memory import DeviceArray, PinnedBuffer, as_device_array, device_empty, pinned_empty
from .pin_cache import PinCache, default_pin_cache
from .pinned_pool import (PinnedBlock, PinnedPool, PinnedPoolFull, PinnedPoolStats, PinnedUsage,
                          default_pinned_pool)
from .pool import DevicePool, PoolStats
from .streams import create_stream, legacy_default_stream, per_thread_default_stream

__all__ = [
    "Device",
    "DeviceFacts",
    "DeviceArray",
    "DevicePool",
    "HostKind",
    "PoolStats",
    "PinCache",
    "PinnedBlock",
    "PinnedBuffer",
    "PinnedPool",
    "PinnedPoolFull",
    "PinnedPoolStats",
    "PinnedUsage",
    "as_cupy",
    "as_device_array",
    "as_torch",
    "compile_file",
    "compile_package_kernel",
    "compile_source",
    "create_event",
    "create_stream",
    "cupy_stream",
    "default_pin_cache",
    "default_pinned_pool",
    "device_empty",
    "elapsed_ms",
    "ensure_current",
    "host_view",
    "join",
    "launch",
    "launch_host_func",
    "legacy_default_stream",
    "like_input",
    "per_thread_default_stream",
    "pinned_empty",
    "record",
    "torch_stream",
    "wait",
]
