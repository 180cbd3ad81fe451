"""Persistent kernels: one launch whose blocks stay resident and pull work.

- :func:`small_tiles_gemm` - ``a @ b`` (float32) cut into many 64 x 64 tiles, either
  one block per tile (``persistent=False``) or a grid of SMs x resident blocks
  pulling tiles from an atomic work queue (``persistent=True``). Same tile code.
- :func:`normalize` - ``x / sum(x)`` in one cooperative launch around
  ``grid.sync()`` (or two launches, ``grid_sync=False``): an example where a
  whole-grid barrier is really needed.

Sources: persistent_gemm.cu, persistent_grid_sync.cu.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..cuda.launch import launch
from ..cuda.streams import as_core_stream, stream_handle
from ._operands import empty_like_kind, operand
from .gemm import _device_info, _float32_cp_async_operands, _module

GEMM_SOURCE = "kernels/persistent_gemm.cu"
SYNC_SOURCE = "kernels/persistent_grid_sync.cu"
TILE = 64
THREADS = 256
_queues: dict[tuple[int, int], Any] = {}  # (device, stream handle) -> 2 zeroed uint32 counters


def _queue(device_index: int, stream: Any):
    """The work-queue counters for launches on ``stream`` (the kernel leaves them zeroed)."""
    from cuda.core import Device as CoreDevice

    from ..cuda.memory import device_empty, memset_d8

    key = (device_index, int(stream_handle(stream)))
    if key not in _queues:
        q = device_empty(2, np.uint32, stream, CoreDevice(device_index).memory_resource)
        memset_d8(q.ptr, 0, q.nbytes, stream)
        _queues[key] = q
    return _queues[key]


def resident_blocks_per_sm(kernel: Any, block: int = THREADS, shared_mem: int = 0) -> int:
    return max(1, int(kernel.occupancy.max_active_blocks_per_multiprocessor(block, shared_mem)))


def small_tiles_gemm(a: Any, b: Any, *, persistent: bool = True, stream: Any, out: Any = None) -> Any:
    """``out = a @ b`` for float32 (M, K) x (K, N) with 64 x 64 tiles; returns ``out``.

    Needs K and N multiples of 4 and 16-byte aligned arrays (16-byte cp.async copies).
    """
    A, B, out, C, s, m, n, k = _float32_cp_async_operands(a, b, out, stream, "small_tiles_gemm", nonempty=True)
    arch, sm_count = _device_info(A.device_index)
    mod = _module(GEMM_SOURCE, arch)
    tiles = -(-m // TILE) * -(-n // TILE)
    if persistent:
        kernel = mod.kernel("gemm_small_tiles_persistent")
        grid = min(tiles, sm_count * resident_blocks_per_sm(kernel))
        q = _queue(A.device_index, s)
    else:
        kernel = mod.kernel("gemm_small_tiles_per_tile")
        grid = tiles
        q = _queue(A.device_index, s)  # unused by the kernel; same signature
    launch(s, kernel, grid, THREADS, np.uint64(A.ptr), np.uint64(B.ptr), np.uint64(C.ptr),
           np.int32(m), np.int32(n), np.int32(k), np.uint64(q.ptr), device_index=A.device_index)
    return out


def normalize(x: Any, *, stream: Any, out: Any = None, grid_sync: bool = True, partials: Any = None) -> Any:
    """``out = x / sum(x)`` for a 1-D float32 device array; returns ``out``.

    ``grid_sync=True``: one cooperative launch (grid = resident blocks) with
    ``grid.sync()`` between the partial sums and the scaling; ``False``: two launches.
    """
    if stream is None:
        raise TypeError("stream is required")
    X = operand(x, "x")
    if len(X.shape) != 1 or X.dtype != "float32":
        raise ValueError(f"x must be a 1-D float32 array, got shape {X.shape} dtype {X.dtype}")
    n = X.shape[0]
    if not 1 <= n < 2**31:
        raise ValueError(f"x must have 1 .. 2**31-1 elements, got {n}")
    s = as_core_stream(stream)
    if out is None:
        out, Y = empty_like_kind(X, (n,), "float32", s)
    else:
        Y = operand(out, "out")
        if Y.shape != (n,) or Y.dtype != "float32":
            raise ValueError(f"out must be a ({n},) float32 array, got {Y.shape} {Y.dtype}")
    arch, sm_count = _device_info(X.device_index)
    mod = _module(SYNC_SOURCE, arch)
    coop = mod.kernel("normalize_grid_sync")
    grid = max(1, min(-(-n // THREADS), sm_count * resident_blocks_per_sm(coop)))
    if partials is None:
        from cuda.core import Device as CoreDevice

        from ..cuda.memory import device_empty

        partials = device_empty(grid, np.float32, s, CoreDevice(X.device_index).memory_resource)
    P = operand(partials, "partials")
    if P.shape[0] < grid:
        raise ValueError(f"partials needs at least {grid} floats")
    if grid_sync:
        launch(s, coop, grid, THREADS, np.uint64(X.ptr), np.uint64(Y.ptr), np.uint64(P.ptr), np.int32(n),
               cooperative=True, device_index=X.device_index)
    else:
        launch(s, mod.kernel("normalize_partials"), grid, THREADS, np.uint64(X.ptr), np.uint64(P.ptr), np.int32(n),
               device_index=X.device_index)
        launch(s, mod.kernel("normalize_scale"), grid, THREADS, np.uint64(X.ptr), np.uint64(Y.ptr), np.uint64(P.ptr),
               np.int32(grid), np.int32(n), device_index=X.device_index)
    return out
