"""Thread-block clusters: share a tile through distributed shared memory.

:func:`cluster_gemm` computes ``a @ b`` (float32) with clusters of
:data:`CLUSTER` blocks along N. With ``share_a=True`` only block rank 0 of each
cluster reads the A slice from global memory and the others read it from rank 0's
shared memory (``cluster.map_shared_rank``); with ``share_a=False`` every block
reads it itself. Source: cluster_gemm.cu.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..cuda.launch import launch
from .gemm import _device_info, _float32_cp_async_operands, _module

SOURCE = "kernels/cluster_gemm.cu"
CLUSTER = 4
TILE = 64
THREADS = 256
TILE_K = 16


def grid_for(m: int, n: int) -> tuple[int, int]:
    tiles_n = -(-n // TILE)
    return (-(-tiles_n // CLUSTER) * CLUSTER, -(-m // TILE))


def a_slice_loads(m: int, n: int, k: int, share_a: bool) -> int:
    """Bytes of A the kernel copies from global memory (by construction; ncu checks it)."""
    gx, gy = grid_for(m, n)
    blocks_loading = (gx // CLUSTER if share_a else gx) * gy
    return blocks_loading * TILE * (-(-k // TILE_K) * TILE_K) * 4


def cluster_gemm(a: Any, b: Any, *, share_a: bool = True, stream: Any, out: Any = None) -> Any:
    """``out = a @ b`` (float32) with 4-block clusters; returns ``out``.

    Needs K and N multiples of 4 and 16-byte aligned arrays.
    """
    A, B, out, C, s, m, n, k = _float32_cp_async_operands(a, b, out, stream, "cluster_gemm")
    arch, _ = _device_info(A.device_index)
    kernel = _module(SOURCE, arch).kernel("cluster_gemm_shared_a" if share_a else "cluster_gemm_own_a")
    launch(s, kernel, grid_for(m, n), THREADS, np.uint64(A.ptr), np.uint64(B.ptr), np.uint64(C.ptr),
           np.int32(m), np.int32(n), np.int32(k), cluster=(CLUSTER, 1, 1), device_index=A.device_index)
    return out
