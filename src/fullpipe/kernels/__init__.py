"""Level 2: pipelined kernels, one technique per CUDA source beside this file.

- gemm_tiled.cu             shared tiles + register blocking, load / sync / compute
- gemm_double_buffer.cu     cuda::pipeline ring of 2-4 stages filled by memcpy_async
- gemm_warp_specialized.cu  loader warp -> compute warps -> storer warp, two pipelines
- gemm_wmma.cu              tensor cores (wmma, fp16/bf16) fed by a cp.async ring
- cluster_gemm.cu           a tile shared by a cluster through distributed shared memory
- persistent_gemm.cu        persistent blocks + atomic work queue vs one block per tile
- persistent_grid_sync.cu   a cooperative launch with grid.sync()

Python fronts: :func:`gemm` (tiled / double_buffer / warp_specialized / wmma),
:func:`cluster_gemm`, :func:`small_tiles_gemm`, :func:`normalize`.
"""

from .cluster import cluster_gemm
from .gemm import VARIANTS, gemm, plan
from .persistent import normalize, small_tiles_gemm

__all__ = ["VARIANTS", "cluster_gemm", "gemm", "normalize", "plan", "small_tiles_gemm"]
