"""The thin runtime layer over cuda.core: one concept per module.

- device.py    device facts, the current context
- streams.py   explicit non-blocking streams; the default streams by name
- events.py    timing and non-timing events, cross-stream waits
- hostfn.py    host functions on a stream, with the no-CUDA-inside rule enforced
- memory.py    pinned host arrays, device arrays, async copies
- pool.py      fullpipe's own stream-ordered memory pool (never the default pool)
- compiler.py  NVRTC -> cubin, cached on disk
- launch.py    launches with clusters, cooperative groups, >48 KiB shared memory
- sass.py      disassembly, to check the instructions a technique is about
- driver.py    checked driver calls raising fullpipe.CudaError
"""

from .compiler import compile_file, compile_package_kernel, compile_source
from .device import Device, DeviceFacts
from .events import create_event, elapsed_ms, join, record, wait
from .hostfn import launch_host_func
from .launch import launch
from .memory import DeviceArray, PinnedBuffer, as_device_array, device_empty, pinned_empty
from .pool import DevicePool, PoolStats
from .streams import create_stream, legacy_default_stream, per_thread_default_stream

__all__ = [
    "Device",
    "DeviceFacts",
    "DeviceArray",
    "DevicePool",
    "PoolStats",
    "PinnedBuffer",
    "as_device_array",
    "compile_file",
    "compile_package_kernel",
    "compile_source",
    "create_event",
    "create_stream",
    "device_empty",
    "elapsed_ms",
    "join",
    "launch",
    "launch_host_func",
    "legacy_default_stream",
    "per_thread_default_stream",
    "pinned_empty",
    "record",
    "wait",
]
