"""Launching one CUDA source's kernels on the hot path: the fused elementwise kernels and
decode attention run ~10 launches per layer of a decode step, where the host's time to
enqueue is the limit, so each launch is a ctypes cuLaunchKernel with argument storage
packed once per thread (:mod:`fullpipe.cuda.hotpath`) and no allocation.

    kernels = KernelSet("kernels/elementwise.cu", kernel_names(), {"swiglu": [u64, u64, i32, i32], ...})
    kernels.launch("swiglu", "swiglu_bf16", dev, grid, block, stream, ptr_in, ptr_out, rows, cols)
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Sequence

from ..cuda import compiler
from ..cuda.device import ensure_current, thread_context
from ..cuda.hotpath import HotPath, PackedArgs, handle_int


class _DeviceKernels:
    """One device's kernel handles (context-independent CUkernels of one cubin) and its SM count."""

    def __init__(self, source: str, names: Sequence[str], device_index: int):
        from ._operands import arch_and_sm_count

        arch, self.sm_count = arch_and_sm_count(device_index)
        mod = _module(source, arch)
        self.handles = {name: handle_int(mod.kernel(name).handle) for name in names}


@functools.lru_cache(maxsize=None)
def _module(source: str, arch: str):
    return compiler.compile_package_kernel(source, arch=arch)


class _PerThread(threading.local):
    """Argument storage per kernel signature (the driver copies it at launch, so one set
    per thread is reused at once) and the last stream's handle."""

    def __init__(self, signatures: dict[str, list]) -> None:
        self.args = {kind: PackedArgs(types) for kind, types in signatures.items()}
        self.stream: Any = None
        self.stream_handle = 0


class KernelSet:
    def __init__(self, source: str, names: Sequence[str], signatures: dict[str, list]):
        """``source``: the package's .cu; ``names``: every kernel it exports; ``signatures``:
        the ctypes argument types per kind of launch."""
        self.source, self.names = source, list(names)
        self._devices: dict[int, _DeviceKernels] = {}
        self._lock = threading.Lock()
        self._local = _PerThread(signatures)
        self._hot = HotPath()  # its launch() keeps no per-call state: one for every thread

    def module(self, arch: str):
        """The compiled module (usable without a GPU)."""
        return _module(self.source, arch)

    def on(self, dev: int) -> _DeviceKernels:
        k = self._devices.get(dev)
        if k is None:
            with self._lock:
                k = self._devices.get(dev)
                if k is None:
                    k = self._devices[dev] = _DeviceKernels(self.source, self.names, dev)
        return k

    def stream_handle(self, stream: Any, dev: int) -> int:
        """``stream``: a cuda.core Stream, an object with ``__cuda_stream__`` or an int
        handle; None: PyTorch's current stream on ``dev``."""
        if stream is None:
            import torch

            return int(torch.cuda.current_stream(dev).cuda_stream)
        loc = self._local
        if stream is loc.stream:  # the decoder passes one stream object for every call of a step
            return loc.stream_handle
        h = stream if type(stream) is int else handle_int(stream)
        loc.stream, loc.stream_handle = stream, h
        return h

    def launch(self, kind: str, name: str, dev: int, grid: int, block: int, stream: Any, *values: Any,
               grid_y: int = 1, grid_z: int = 1) -> None:
        """Launch kernel ``name`` (arguments of signature ``kind``) in ``dev``'s context."""
        kernels = self._devices.get(dev) or self.on(dev)
        h = self.stream_handle(stream, dev)
        if thread_context.device != dev:
            ensure_current(dev)
        args = self._local.args[kind]
        args.set(*values)
        self._hot.launch(kernels.handles[name], grid, block, args, h, 0, grid_y, grid_z)
