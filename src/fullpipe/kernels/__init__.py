"""Level 2: pipelined kernels, one technique per CUDA source beside this file.
README.md beside this file shows the ladder: each rung, the one idea it adds, where
to see it in the code and what it measured.

- gemm_tiled.cu             shared tiles + register blocking, load / sync / compute
- gemm_double_buffer.cu     a ring of 2-4 slices filled by cp.async (CCCL cuda::pipeline)
- gemm_warp_specialized.cu  loader warp -> compute warps -> storer warp, joined by mbarriers
- gemm_fp32_ceiling.cu      double_buffer without its loads: the fp32 tile math's ceiling
- gemm_wmma.cu              tensor cores (wmma, fp16/bf16) fed by a cp.async ring
- cluster_gemm.cu           a tile shared by a cluster through distributed shared memory
- persistent_gemm.cu        persistent blocks + atomic work queue vs one block per tile
- persistent_grid_sync.cu   a cooperative launch with grid.sync()
- persistent_recurrent.cu   a chain of dependent steps in one cooperative launch
- gemm_hopper_wgmma.cu      Hopper rung 1: wgmma from 128B-swizzled smem filled by cp.async
- gemm_hopper_tma.cu        Hopper rung 2: TMA ring, mbarrier transaction counts
- gemm_hopper_ws.cu         Hopper rung 3: TMA producer warpgroup, two wgmma consumers, setmaxnreg
- gemm_hopper_persistent.cu Hopper rung 4: persistent, clusters of 2 with TMA multicast, TMA store
- flash_attention.cu        FlashAttention-2 forward on mma.sync: cp.async K/V rings, ldmatrix, online softmax
- flash_attention_hopper.cu FlashAttention-3 structure: TMA producer warpgroup, two wgmma consumers (P V from
                            registers), intra-warpgroup overlap and ping-pong; attention(backend=...) picks it
- elementwise.cu            the decoder stack's fused elementwise pieces: RMSNorm (with the residual add),
                            RoPE of Q and K from the fused projection, SwiGLU; one launch each, fp32 inside
- peer_copy.cu              a copy by the SMs between two GPUs' memory over the link (push or pull)
- decode_attention.cu       flash-decoding over a paged KV cache: one query token per sequence, split over
                            the cached tokens and combined; GQA; kv_write puts new tokens into their pages

role_stamps.py: the warp-specialized Hopper GEMM's ROLE_STAMPS build, %globaltimer stamps of what each
role (TMA producer, wgmma consumers, epilogue) does over time.

Shared device headers (``fullpipe/cuda/include/fullpipe/``), one concept each:
fp32_tile.cuh (the fp32 tile math), fp32_slice_copier.cuh (its async copier),
cp_async.cuh (cp.async), mbarrier.cuh (mbarriers), timer.cuh (device clocks),
tma.cuh / wgmma.cuh / gemm_hopper_tile.cuh (Hopper), mma_sync.cuh / online_softmax.cuh
(attention).

Python fronts: :func:`gemm` (tiled / double_buffer / warp_specialized / wmma and the
hopper_* rungs), :func:`gemm_hopper`, :func:`attention`, :func:`cluster_gemm`,
:func:`small_tiles_gemm`, :func:`normalize`, :func:`tune_gemm` (measured plans for
``gemm(variant="hopper")``); :mod:`.elementwise`, :mod:`.peer_copy`, :mod:`.decode_attention` and
:mod:`.role_stamps` by module.
"""

from .cluster import cluster_gemm
from .flash_attention import attention
from .gemm import HOPPER_VARIANTS, VARIANTS, gemm, plan
from .gemm_tuning import tune_gemm
from .hopper_gemm import gemm_hopper
from .persistent import normalize, small_tiles_gemm

__all__ = ["HOPPER_VARIANTS", "VARIANTS", "attention", "cluster_gemm", "gemm", "gemm_hopper", "normalize", "plan",
           "small_tiles_gemm", "tune_gemm"]
