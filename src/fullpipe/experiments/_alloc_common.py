"""What the five allocator experiments share: the kernels, the allocators behind one
small interface, workload sizes, and the device description for the Result.

Allocators compared (each experiment says which it uses):

- ``DriverMalloc``: ``cuMemAlloc`` / ``cuMemFree`` (what ``cudaMalloc``/``cudaFree`` do);
  ``cuMemFree`` waits for the whole device before it returns.
- ``PoolAllocator``: fullpipe's :class:`~fullpipe.cuda.pool.DevicePool`, stream-ordered.
- ``TorchAllocator``: PyTorch's caching allocator through
  ``torch.cuda.caching_allocator_alloc(size, stream=...)`` / ``caching_allocator_delete``.
- ``CupyAllocator``: CuPy's default ``MemoryPool`` on a ``cupy.cuda.ExternalStream``.
- ``Preallocated``: no allocation at all (buffers sized for the maximum, made once):
  the bound that the others are measured against.

Every ``alloc(nbytes, stream)`` returns ``(device_pointer, handle)``; ``free(handle,
stream)`` gives it back, in stream order where the allocator has one.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ..cuda import compiler
from ..cuda import driver as drv
from ..cuda.device import device_info  # noqa: F401 (common.device_info for the alloc experiments)
from ..cuda.launch import launch

MiB = 1 << 20
GiB = 1 << 30
THREADS = 256


# --------------------------------------------------------------------------- device
@functools.lru_cache(maxsize=4)
def _module(relpath: str, arch: str):
    return compiler.compile_package_kernel(relpath, arch=arch)


def kernels(dev: Any):
    """The compiled alloc_kernels.cu (fill_pattern, check_pattern, scale_bias, touch)."""
    return _module("experiments/alloc_kernels.cu", compiler.default_arch(dev))


def probes(dev: Any):
    """The compiled cuda/probes.cu (spin_stamp: globaltimer stamps)."""
    return _module("cuda/probes.cu", compiler.default_arch(dev))


def grid_for(n_items: int, dev: Any, per_sm: int = 8) -> int:
    """Blocks for a grid-stride kernel over ``n_items``: enough to fill the SMs, no more."""
    return max(1, min(math.ceil(n_items / THREADS), dev.facts.sm_count * per_sm))


# --------------------------------------------------------------------------- launches
def fill_pattern(dev, stream, ptr: int, nbytes: int, tag: int) -> None:
    words = nbytes // 4
    launch(stream, kernels(dev).kernel("fill_pattern"), grid_for(words, dev), THREADS,
           np.uint64(ptr), np.uint64(words), np.uint32(tag & 0xFFFFFFFF))


def check_pattern(dev, stream, ptr: int, nbytes: int, tag: int, counter_ptr: int) -> None:
    words = nbytes // 4
    launch(stream, kernels(dev).kernel("check_pattern"), grid_for(words, dev), THREADS,
           np.uint64(ptr), np.uint64(words), np.uint32(tag & 0xFFFFFFFF), np.uint64(counter_ptr))


def scale_bias(dev, stream, out_ptr: int, in_ptr: int, n: int, iters: int, a: float = 0.5, b: float = 1.0) -> None:
    launch(stream, kernels(dev).kernel("scale_bias"), grid_for(n, dev), THREADS,
           np.uint64(out_ptr), np.uint64(in_ptr), np.uint64(n), np.float32(a), np.float32(b), np.int32(iters))


def scale_bias_reference(x: np.ndarray, iters: int, a: float = 0.5, b: float = 1.0) -> np.ndarray:
    """What scale_bias computes, on the host (bit-exact: x*0.5 is exact, so FMA or not
    gives the same float32)."""
    y = x.astype(np.float32).copy()
    a32, b32 = np.float32(a), np.float32(b)
    for _ in range(iters):
        y = y * a32 + b32
    return y


def touch(dev, stream, ptr: int, nbytes: int, value: int = 0) -> None:
    vectors = nbytes // 16
    if vectors:
        launch(stream, kernels(dev).kernel("touch"), grid_for(vectors, dev), THREADS,
               np.uint64(ptr), np.uint64(vectors), np.uint32(value & 0xFFFFFFFF))


# --------------------------------------------------------------------------- workloads
def log_uniform_sizes(rng: np.random.Generator, n: int, lo: int, hi: int, align: int = 4096) -> list[int]:
    """``n`` sizes spread evenly in log between ``lo`` and ``hi`` bytes, multiples of ``align``."""
    if not 0 < lo <= hi:
        raise ValueError(f"need 0 < lo <= hi, got {lo}, {hi}")
    raw = np.exp(rng.uniform(math.log(lo), math.log(hi), size=n))
    return [max(align, int(round(s / align)) * align) for s in raw]


def sequence_lengths(rng: np.random.Generator, n: int, lo: int = 128, hi: int = 8192, median: int = 1024,
                     sigma: float = 0.9) -> list[int]:
    """LLM-like request lengths: log-normal around ``median``, clipped to [lo, hi],
    multiples of 16 (a typical tile)."""
    if not 0 < lo <= median <= hi:
        raise ValueError(f"need 0 < lo <= median <= hi, got {lo}, {median}, {hi}")
    raw = rng.lognormal(math.log(median), sigma, size=n)
    return [int(min(hi, max(lo, round(v / 16) * 16))) for v in raw]


# --------------------------------------------------------------------------- allocators
class Unavailable(Exception):
    """An optional allocator (PyTorch, CuPy) is not installed or not usable here."""


class DriverMalloc:
    label = "cuMemAlloc/cuMemFree"
    stream_ordered = False

    def alloc(self, nbytes: int, stream: Any) -> tuple[int, Any]:
        ptr = int(drv.call("cuMemAlloc", nbytes))
        return ptr, ptr

    def free(self, handle: Any, stream: Any) -> None:
        drv.call("cuMemFree", handle)

    def close(self) -> None:
        pass


class PoolAllocator:
    label = "fullpipe pool"
    stream_ordered = True

    def __init__(self, pool: Any):
        self.pool = pool

    def alloc(self, nbytes: int, stream: Any) -> tuple[int, Any]:
        buf = self.pool.allocate(nbytes, stream)
        return int(buf.handle), buf

    def free(self, handle: Any, stream: Any) -> None:
        self.pool.free(handle, stream)

    def close(self) -> None:
        pass


class TorchAllocator:
    """PyTorch's caching allocator (whatever backend PYTORCH_CUDA_ALLOC_CONF selects)."""

    label = "PyTorch caching allocator"
    stream_ordered = True

    def __init__(self, device_index: int = 0):
        try:
            import torch
        except Exception as exc:  # not installed, or broken
            raise Unavailable(f"PyTorch not importable: {type(exc).__name__}: {exc}") from exc
        if not torch.cuda.is_available():
            raise Unavailable("PyTorch has no CUDA device")
        self.torch = torch
        self.device_index = device_index
        self.label = f"PyTorch caching allocator ({torch.cuda.get_allocator_backend()})"

    def alloc(self, nbytes: int, stream: Any) -> tuple[int, Any]:
        ptr = int(self.torch.cuda.caching_allocator_alloc(nbytes, self.device_index, int(stream.handle)))
        return ptr, ptr

    def free(self, handle: Any, stream: Any) -> None:
        self.torch.cuda.caching_allocator_delete(handle)

    def close(self) -> None:
        self.torch.cuda.synchronize()
        self.torch.cuda.empty_cache()


class CupyAllocator:
    """CuPy's default memory pool; the allocation's stream is CuPy's current stream,
    set to ours through an ExternalStream."""

    label = "CuPy MemoryPool"
    stream_ordered = True

    def __init__(self):
        try:
            import cupy
        except Exception as exc:
            raise Unavailable(f"CuPy not importable: {type(exc).__name__}: {exc}") from exc
        self.cupy = cupy
        self.pool = cupy.get_default_memory_pool()
        self._streams: dict[int, Any] = {}
        self._live: dict[int, Any] = {}

    def _external(self, stream: Any):
        h = int(stream.handle)
        ext = self._streams.get(h)
        if ext is None:
            ext = self._streams[h] = self.cupy.cuda.ExternalStream(h)
        return ext

    def alloc(self, nbytes: int, stream: Any) -> tuple[int, Any]:
        with self._external(stream):
            mem = self.pool.malloc(nbytes)
        self._live[mem.ptr] = mem
        return int(mem.ptr), int(mem.ptr)

    def free(self, handle: Any, stream: Any) -> None:
        # Dropping the last reference returns the block to the arena of the stream it
        # was allocated on (CuPy keeps one per stream), in that stream's order.
        del self._live[handle]

    def close(self) -> None:
        self.cupy.cuda.Device().synchronize()
        self.pool.free_all_blocks()


def optional_allocator(kind: str):
    """(allocator, None) or (None, reason it is skipped)."""
    try:
        return (TorchAllocator() if kind == "torch" else CupyAllocator()), None
    except Unavailable as exc:
        return None, str(exc)
    except Exception as exc:  # a framework that imports but cannot start its CUDA side
        return None, f"{kind} unusable: {type(exc).__name__}: {exc}"
