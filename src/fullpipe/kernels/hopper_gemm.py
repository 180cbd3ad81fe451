"""The Hopper GEMM ladder: ``C = A @ B`` in bf16/fp16 with fp32 accumulation on sm_90a.

    c = gemm_hopper(a, b, variant="persistent", stream=s)

A is (M, K), B is (K, N), both row-major bf16 or fp16 (same dtype); C is (M, N) in
that dtype. One ``.cu`` source per rung, each adding one idea (see the top of each):

===========  =============================  ============================================
variant      source                         technique
===========  =============================  ============================================
wgmma        gemm_hopper_wgmma.cu           wgmma from 128B-swizzled shared memory,
                                            filled by a 4-stage cp.async ring
tma          gemm_hopper_tma.cu             TMA boxes into a 4-stage ring, mbarrier
                                            transaction counts; all warps do the same job
ws           gemm_hopper_ws.cu              producer warpgroup (TMA) + 2 consumer
                                            warpgroups (wgmma), full/empty mbarriers,
                                            setmaxnreg
persistent   gemm_hopper_persistent.cu      ws + persistent tile scheduler, clusters of 2
                                            with TMA multicast of B, TMA-store epilogue
===========  =============================  ============================================

Every rung computes 128 x 256 C tiles (two consumer warpgroups of m64n256k16) from
K slices of 64; the persistent rung also builds 128 x 128 and 128 x 64 tiles
(``tile_n=128``, ``64``), and 64 x 128 and 64 x 64 with one consumer warpgroup
(``tile_m=64``), for products that 128 x 256 tiles spread over too few SMs, 128 x 192
tiles (``tile_n=192``) where those fill the last wave that 128 x 256 ones leave part empty, and clusters
of two along N sharing A (:data:`PERSISTENT_ALONG_N`, a candidate of the measured plans).
For b = ``w.T`` above 64 rows (a prefill of a few hundred tokens) it also computes the
transposed product (``swap_ab``, :func:`swap_build`): W's rows in 128-row blocks on wgmma's
M, the product's rows in tiles of 80-256 columns on its N (200 rows compute 208, not the
256 of two 128-row tiles, or 224 in two tiles of 112 where W's rows are few), the
activations multicast in clusters of 2, the result stored transposed; for a row-major b
the same, b's columns read MN-major (``a_mn_major``). For a few rows (a
decode step) :mod:`.skinny_gemm` has its own kernel; ``fullpipe.kernels.gemm(variant="hopper")``
picks it or the persistent rung.

Constraints (checked, ``ValueError`` naming them): M, N, K >= 1;
K and N multiples of 8 (a row of A or B must be a multiple of 16 bytes, which TMA
needs for its strides and the cp.async rung for whole 16-byte chunks); A, B and C
16-byte aligned. Any M, N, K otherwise: TMA zero-fills boxes that hang over an edge
and clips stores (the persistent rung loads smaller boxes at M's and W's edges and leaves
the rest of the slot as it was: those rows only reach places of C past M and N); the
cp.async rung zero-fills chunks past the edges.

Build options of the persistent rung (cluster shape, tile order, epilogue stores, tile
width) are a :class:`PersistentBuild`; :func:`default_build` picks the one ``gemm_hopper``
uses (:data:`PERSISTENT` for large products, smaller tiles for small ones), and ``scripts/hopper-gemm-sweep`` measures
the alternatives.

Tensor maps: :func:`tensor_map_args` computes cuTensorMapEncodeTiled's arguments as a
:class:`TensorMapArgs` (pure, no GPU), :func:`encode_tensor_map` calls the driver. The
maps travel as ``__grid_constant__`` kernel parameters (128 bytes each), so the kernels
are launched here with cuLaunchKernelEx and a raw parameter array.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import os
import struct
import threading
from typing import Any, Callable

from ..cuda import compiler
from ..cuda import driver as drv
from ..cuda.device import ensure_current
from ..cuda.launch import set_max_dynamic_shared_memory
from ..cuda.streams import as_core_stream
from ._operands import (Operand, arch_and_sm_count, current_stream_handle, empty_like_kind, matmul_shape, operand,
                        row_pitch)

SOURCES = {
    "wgmma": "kernels/gemm_hopper_wgmma.cu",
    "tma": "kernels/gemm_hopper_tma.cu",
    "ws": "kernels/gemm_hopper_ws.cu",
    "persistent": "kernels/gemm_hopper_persistent.cu",
}
VARIANTS = tuple(SOURCES)
DTYPES = {"bfloat16": "bf16", "float16": "f16"}

# Geometry (gemm_hopper_tile.cuh and the kernels): keep in step with the .cu sources.
# BN and SLICE_BYTES are those of rungs 1-3 and the persistent rung's default tile; a
# PersistentBuild has its own tile_n.
BM, BN, BK = 128, 256, 64
CHUNK_N = 64  # B columns per TMA box / swizzle chunk (128 bytes)
OUT_N, OUT_ROWS = 64, 64  # TMA store box of the persistent epilogue
# The persistent rung cuts its boxes at the last rows of A (M) and of W (N, for b = w.T):
# a tile there loads the rows inside the matrix as boxes of these heights (the same matrix's
# maps, HopperPlan.edge_maps), not a box that hangs past the edge (gemm_hopper_persistent.cu,
# EdgeMaps: 258 x 3456 x 5216 ran 1.6x the time of the same product without such boxes).
EDGE_BOX_ROWS = (64, 32, 16, 8)
STAGES = 4
CLUSTER = 2  # blocks per cluster along M in the default build (PERSISTENT); the experiment counts L2 reads with it
ELEM = 2
SLICE_BYTES = (BM * BK + BK * BN) * ELEM  # 48 KiB
THREADS = {"wgmma": 256, "tma": 256, "ws": 384}  # (the persistent rung's: PersistentBuild.threads)
MAX_BLOCK_SHARED = 227 * 1024
CONSUMERS = 2  # consumer warpgroups per block (64 rows of C each; a PersistentBuild's .consumers)
# Stream-K (the persistent rung): the workspace's header (the ticket counter), then a flag
# per consumer warpgroup in a region of WORKSPACE_FLAGS places whatever the launch (so that
# launches of any build on one kept workspace find their flags zero), then the partial sums
# (a warpgroup's are its 64 x tile_n fp32 accumulators). gemm_hopper_persistent.cu, Workspace.
WORKSPACE_HEADER = 256
WORKSPACE_FLAGS = 4096
WORKSPACE_ZEROED = WORKSPACE_HEADER + WORKSPACE_FLAGS * 4  # (bytes: the counter and the flags)
# Two waves of tiles or more: deal the last wave and the one before it out as K runs where the
# last wave holds at most this share of the clusters (a nearly empty last wave). Where it is
# fuller, whole tiles won (stream_k's docstring; one wave and a second: the next constant).
SK_LAST_WAVE_AT_MOST = 1 / 3
# One wave and a second: every tile dealt out (clusters of two blocks or more, runs of
# MIN_SPLIT_SLICES or more; measured on clusters of 2 along M) where the second holds at most
# this share of the clusters (stream_k's docstring)
SK_ONE_WAVE_SECOND_AT_MOST = 1 / 2
# Below one wave: each tile split into at most MAX_SPLIT runs of MIN_SPLIT_SLICES or more
# (a run pays its pipeline's fill; the finishing run adds every other run's sums)
MAX_SPLIT = 8
MIN_SPLIT_SLICES = 16
# ... and only tiles of this many K slices or more: a split costs a few microseconds whatever
# the tile (the finishing run's wait and sums; in a CUDA graph, the workspace's memset node),
# more than halving a short tile's main loop saves (stream_k's docstring; session 52)
MIN_SPLIT_TILE_SLICES = 40
# Below one wave, more than half of it (no split of two fits) and at most this share of the
# clusters, clusters of two blocks or more (measured on clusters of 2 along M): every tile dealt
# out over every cluster where each cluster's run is MIN_ALL_RUN_SLICES slices or more
# (stream_k's docstring)
SK_BELOW_ONE_WAVE_AT_MOST = 2 / 3
MIN_ALL_RUN_SLICES = 50


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to


def shared_mem_bytes(variant: str, stages: int = STAGES, tile_n: int = BN, tile_m: int = BM) -> int:
    """Dynamic shared memory of a rung: its SharedStorage (a 1024-aligned struct, so its
    size rounds up to 1 KiB) plus 1 KiB of slack for aligning the dynamic base to 1024."""
    ring = stages * (tile_m * BK + BK * tile_n) * ELEM
    barriers = {"wgmma": 0, "tma": 1, "ws": 2, "persistent": 2}[variant] * stages * 8
    consumers = tile_m // 64
    epilogue = consumers * 2 * OUT_ROWS * OUT_N * ELEM if variant == "persistent" else 0
    return _round_up(ring + epilogue + barriers, 1024) + 1024


@dataclasses.dataclass(frozen=True)
class PersistentBuild:
    """Compile-time options of the persistent rung (the -D macros of
    gemm_hopper_persistent.cu; its header says what each one does).

    ``cluster_m`` blocks along M share B, ``cluster_n`` blocks along N share A (both
    multicast when ``multicast``); ``tile_order`` "grouped" walks ``group_m`` cluster-tile
    rows at a time, "hilbert" follows a Hilbert curve; ``stmatrix`` writes the epilogue's
    shared-memory pieces with stmatrix; ``tile_n`` the block tile's columns (256, or 128
    or 64 for small products, or 192, whose waves fill where 256-wide ones leave part of the
    last empty); ``stages`` the slices in the ring (a 128-wide slice is 32
    KiB, so 6 of them fit where 4 of 48 KiB do; 8 of a 64-wide one's 24); ``b_k_major``: B
    given as the transpose of a row-major (N, K) matrix (``w.T`` of an nn.Linear weight),
    read as it lies; ``tile_m`` the block tile's rows (128: two consumer warpgroups, or 64:
    one, in a block of 256 threads, one block a cluster or, for the transposed product, pairs
    along M sharing x's slice); ``swap_ab``: the transposed
    product C^T = W X^T for b = ``w.T``: W's rows walked in ``tile_m`` blocks, the
    product's rows the tile's ``tile_n`` columns, any of 80 ... 256 in steps of 16
    (:data:`SWAP_WIDTHS`), so that M = 200 computes 208 rows in one tile, not the 256 of two
    128-row tiles, or 224 in two tiles of 112 (the .cu header says how); ``a_mn_major``: the
    same transposed product for a row-major (K, N) b, read as it lies (its columns on
    wgmma's M, MN-major), not as ``w.T``."""

    group_m: int = 8
    cluster_m: int = 2
    cluster_n: int = 1
    multicast: bool = True
    tile_order: str = "grouped"
    stmatrix: bool = False
    tile_n: int = 256
    stages: int = STAGES
    b_k_major: bool = False
    tile_m: int = BM
    swap_ab: bool = False
    a_mn_major: bool = False

    def __post_init__(self) -> None:
        if self.a_mn_major and (not self.swap_ab or self.cluster_n != 1):
            raise ValueError("a_mn_major (a row-major b's transposed product) needs swap_ab and cluster_n=1 (no "
                             f"block shares b's slice), got swap_ab={self.swap_ab}, cluster_n={self.cluster_n}")
        if self.swap_ab:
            if self.tile_n not in SWAP_WIDTHS or not self.b_k_major or self.stmatrix:
                raise ValueError(f"swap_ab (the transposed product) takes b = w.T (b_k_major), no stmatrix, and a "
                                 f"tile_n of {SWAP_WIDTHS[0]} ... {SWAP_WIDTHS[-1]} in steps of 16, got "
                                 f"tile_n={self.tile_n}, b_k_major={self.b_k_major}, stmatrix={self.stmatrix}")
            if self.cluster_m > 1 and self.tile_n in SWAP_WIDTHS_ONE_BLOCK:
                raise ValueError(f"the transposed product's {self.tile_n}-wide tile runs one block a cluster: ptxas of "
                                 f"CUDA 13.0 crashes compiling it in clusters (SWAP_WIDTHS_ONE_BLOCK)")
        elif self.tile_n not in (256, 192, 128, 64):
            raise ValueError(f"tile_n must be 256, 192, 128 or 64 (or, with swap_ab, one of {SWAP_WIDTHS}), "
                             f"got {self.tile_n}")
        if self.tile_m not in (128, 64):
            raise ValueError(f"tile_m must be 128 or 64, got {self.tile_m}")
        if self.tile_m == 64 and self.cluster != 1 and not (self.swap_ab and (self.cluster_m, self.cluster_n) == (2, 1)):
            raise ValueError(f"64-row tiles run one block a cluster, or for the transposed product (swap_ab) in pairs "
                             f"along M, got {self.cluster_m} x {self.cluster_n}")
        # (boxes of W's rows other than 64: the transposed product's, and the 96 of a 192-wide pair's)
        w_boxes = self.b_k_major and self.b_box_rows % 8 == 0 and (self.swap_ab or self.tile_n == 192)
        if self.tile_n % self.cluster_m or (self.b_box_rows != CHUNK_N and not w_boxes):
            raise ValueError(f"cluster_m={self.cluster_m} cannot share a {self.tile_n}-wide B slice evenly (in 64-wide "
                             "chunks, or, for b = w.T, in boxes of whole 8-row swizzle atoms of W's rows)")
        if self.stages < 2 or shared_mem_bytes("persistent", self.stages, self.tile_n, self.tile_m) > MAX_BLOCK_SHARED:
            raise ValueError(f"stages={self.stages}: the ring needs 2 or more slices and must fit in "
                             f"{MAX_BLOCK_SHARED} bytes of shared memory")
        if self.cluster_m not in (1, 2, 4) or self.cluster_n not in (1, 2):
            raise ValueError(f"cluster_m must be 1, 2 or 4 and cluster_n 1 or 2, got {self.cluster_m} x "
                             f"{self.cluster_n}")
        if self.tile_order not in ("grouped", "hilbert"):
            raise ValueError(f"tile_order must be 'grouped' or 'hilbert', got {self.tile_order!r}")
        if self.group_m < 1:
            raise ValueError(f"group_m must be >= 1, got {self.group_m}")

    @property
    def cluster(self) -> int:
        """Blocks per cluster."""
        return self.cluster_m * self.cluster_n

    @property
    def consumers(self) -> int:
        """Consumer warpgroups a block (64 rows of C each)."""
        return self.tile_m // 64

    @property
    def threads(self) -> int:
        """Threads a block: the producer's warpgroup and the consumers'."""
        return (1 + self.consumers) * 128

    @property
    def shared_mem(self) -> int:
        """Dynamic shared memory a block."""
        return shared_mem_bytes("persistent", self.stages, self.tile_n, self.tile_m)

    @property
    def partial_bytes(self) -> int:
        """One consumer warpgroup's stream-K partial sums: 64 x tile_n fp32."""
        return 64 * self.tile_n * 4

    @property
    def b_box_rows(self) -> int:
        """Rows of each box of B's slice: 64 (K-rows of a row-major B, or rows of W = B^T),
        or a block's share of a tile_n that is not a multiple of 64 (swap_ab)."""
        if self.tile_n % CHUNK_N == 0 and (self.tile_n // CHUNK_N) % self.cluster_m == 0:
            return CHUNK_N
        return self.tile_n // self.cluster_m

    @property
    def a_box_rows(self) -> int:
        """Rows of A one block loads per slice: its share of the tile's rows when A is multicast."""
        return self.tile_m // self.cluster_n if self.multicast else self.tile_m

    def defines(self) -> dict[str, int]:
        return {"GROUP_M": self.group_m, "CLUSTER_M": self.cluster_m, "CLUSTER_N": self.cluster_n,
                "MULTICAST": int(self.multicast), "TILE_ORDER": int(self.tile_order == "hilbert"),
                "STMATRIX": int(self.stmatrix), "TILE_N": self.tile_n, "STAGES": self.stages,
                "B_K_MAJOR": int(self.b_k_major), "TILE_M": self.tile_m, "SWAP_AB": int(self.swap_ab),
                "A_MN_MAJOR": int(self.a_mn_major)}

    @property
    def label(self) -> str:
        parts = [f"{self.cluster_m}x{self.cluster_n}", "hilbert" if self.tile_order == "hilbert" else f"g{self.group_m}"]
        if not self.multicast:
            parts.append("nomc")
        if self.stmatrix:
            parts.append("stsm")
        if self.tile_m != BM:
            parts.append(f"m{self.tile_m}")
        if self.tile_n != 256:
            parts.append(f"n{self.tile_n}")
        if self.stages != STAGES:
            parts.append(f"s{self.stages}")
        if self.b_k_major:
            parts.append("bT")
        if self.swap_ab:
            parts.append("swap")
        if self.a_mn_major:
            parts.append("bkn")
        return "-".join(parts)


# The transposed product's tile widths (swap_ab): the product's rows rounded up to these.
SWAP_WIDTHS = tuple(range(80, 257, 16))
# ... of which these run one block a cluster only: ptxas of CUDA 13.0 (NVRTC and nvcc alike)
# segfaults compiling them in clusters of 2 (each block loading 40, 48 or 72 rows of the
# activations' slice; 56-120 compile), where CUDA 13.5's compiles all (an H200 host, session 56)
SWAP_WIDTHS_ONE_BLOCK = (80, 96, 144)
SWAP_PAIR_WIDTHS = tuple(w for w in SWAP_WIDTHS if w not in SWAP_WIDTHS_ONE_BLOCK)


# The build gemm_hopper(variant="persistent") runs. To adopt a sweep winner, change this line.
PERSISTENT = PersistentBuild(group_m=8, cluster_m=2, cluster_n=1, multicast=True, tile_order="grouped", stmatrix=False)
# The 128 x 256 build for products of at most 128 rows (a decode step's M = requests) whose
# tiles fill more than half the SMs: one block a cluster. In a cluster of two along M the
# second block's rows all lie past the end: it would run a whole main loop on zeros, on half
# the SMs. (Fewer such tiles: the smaller builds below, also one block a cluster.)
PERSISTENT_ONE_ROW = PersistentBuild(group_m=8, cluster_m=1, cluster_n=1, multicast=True, tile_order="grouped",
                                     stmatrix=False)
# The same 128 x 256 tiles in clusters of two along N (1 x 2): the pair shares A (multicast)
# instead of B, so the cluster tile is 128 x 512 and M is covered in steps of 128 rows, not
# 256 (523 rows: 640 computed, where clusters along M compute 768). A cluster reads a quarter
# more bytes a slice than along M (A once, B twice). Measured plans only (gemm_tuning), never
# the rule's: on an H200 (session 49, p308: 80 random products of 129-6000 rows, CUDA-graph
# replay) it was the fastest plan on 16 and beat every other by more than 2 % on 12 (1.02-1.22x:
# 299 x 5296 x 7864 1.22x, 4185 x 6960 x 4512 1.15x), but ran slower than clusters along M on
# most (4847 x 3240 x 8072: 0.81x, 5897 x 6152 x 8296: 0.87x). 11 of the 12 wins had an odd
# number of 128-row tiles, and as many losses did: the shape alone did not tell.
PERSISTENT_ALONG_N = dataclasses.replace(PERSISTENT, cluster_m=1, cluster_n=2)


# Smaller tiles for products whose 128 x 256 tiles fill at most half the GPU's clusters,
# both one block a cluster (launched without the cluster attribute, _prepare):
#   128 x 128 block tiles (m64n128k16), a 6-slice ring: twice as many tiles. On an H100
#   (session 27, p176; x cuBLAS, 128 x 256 -> 128 x 128 in clusters of 2): 1024^3 0.42 ->
#   0.63, 512 x 4096 x 4096 0.68 -> 0.91, 128 x 11008 x 4096 0.74 -> 0.97; where 128 x 256
#   tiles fill more than half a wave they won (1536^3: 0.61 against 0.53). One block a
#   cluster beat clusters of 2 sharing B on all 12 small products of p248 on an H200, by
#   1-9 % (1024 x 2048 x 1024 0.88 against 0.81x cuBLAS, 512 x 4096 x 4096 0.87 against
#   0.85): a cluster's barriers cost ~0.5 us a launch and these products are not short of L2.
#   128 x 64 block tiles (m64n64k16; a 64-wide B slice is one chunk: nothing to share along
#   M), an 8-slice ring of 24 KiB slices: where even 128 x 128 tiles would leave half the SMs
#   idle. On an H200 (p248, x cuBLAS, 128 x 128 -> 128 x 64): 512^3 0.59 -> 0.72, 1024^3
#   0.62 -> 0.79, 1024^2 x 4096 0.62 -> 0.72, 256 x 4096 x 4096 0.65 -> 0.77; where
#   128 x 128 tiles fill more than half a wave they won (1024 x 2048 x 1024 0.88 against 0.71).
PERSISTENT_NARROW = dataclasses.replace(PERSISTENT_ONE_ROW, tile_n=128, stages=6)
PERSISTENT_SMALL = dataclasses.replace(PERSISTENT_ONE_ROW, tile_n=64, stages=8)
# Tiles of 64 rows (one consumer warpgroup, 256 threads), 8-slice rings: twice the tiles of
# the 128-row builds above, and no 64 rows of padding where M is an odd number of 64s (M <=
# 64, 192, 320 ...). cuBLAS runs 64 x 64 and 64 x 48 tiles on such products (p265). On an
# H200 (session 39, p266 and p267's 111 products up to 1024 rows; x cuBLAS, the 128-row
# build the rule chose before -> the 64-row one): 256 x 2048 x 2048 0.54 -> 0.82, 512^3 0.81
# -> 0.98, 128 x 4096 x 4096 0.82 -> 0.95, 192 x 4096 x 4096 0.70 -> 1.15, 320 x 2048 x 4096
# 0.86 -> 1.31, 64 x 8192 x 4096 0.62 -> 1.00; 64 x 128 against 128 x 64 at the same tile
# count (1024^3): 0.89 against 0.85. On 44 held-out shapes (p268) the rule ran 1.08x the
# rule before it (geometric mean), 0.92 of the best of the four builds.
PERSISTENT_M64_N128 = dataclasses.replace(PERSISTENT_ONE_ROW, tile_m=64, tile_n=128, stages=8)
PERSISTENT_M64_N64 = dataclasses.replace(PERSISTENT_ONE_ROW, tile_m=64, tile_n=64, stages=8)
# 128 x 128 tiles in clusters of 2 along M sharing B (multicast: each B slice read once for
# both tile rows), for one row of clusters (129-256 rows) where the rule would give 128 x 128
# tiles one block a cluster (default_build). On an H200 (session 51, p335, 40 held-out random
# products of 129-256 rows, N 2048-16384, K 1024-16384): 0.614 -> 0.706x cuBLAS, 1.15x in
# geometric mean (0.94-1.49x; 4 slower by more than 3 %: about 20 cluster tiles at 190-250 slices).
PERSISTENT_NARROW_PAIR = dataclasses.replace(PERSISTENT, tile_n=128, stages=6)
# 128 x 192 tiles (m64n192k16, a 4-slice ring of 40 KiB slices), where 128 x 256 tiles, or the
# build the rule chose, leave a wave a quarter or a third empty and 192-wide ones fill it
# (:func:`_fills_sooner`): one block a cluster (either layout of b); and, for b = w.T only, in pairs
# along M sharing W's slice as two boxes of 96 of its rows (a row-major b's 64-column chunks do
# not split in two), a build of the measured plans (gemm_tuning) only: where the rule's first form
# took it (one block a cluster dealt out), the transposed product in more row tiles now ends sooner.
PERSISTENT_192 = dataclasses.replace(PERSISTENT_ONE_ROW, tile_n=192)
PERSISTENT_192_PAIR = dataclasses.replace(PERSISTENT, tile_n=192, b_k_major=True)


def swap_build(m: int, tile_m: int = BM, cluster_m: int = 2, row_tiles: int = 1,
               cluster_n: int = 1) -> PersistentBuild:
    """The transposed product's build (``swap_ab``) for M rows of b = ``w.T`` in ``row_tiles``
    tiles of the product's rows (at most 256 rows each): M / row_tiles rounded up to
    SWAP_WIDTHS (SWAP_PAIR_WIDTHS in clusters sharing the activations' slice), blocks of
    ``tile_m`` of W's rows in clusters of ``cluster_m`` along them (multicasting the
    activations' slice) or of ``cluster_n`` along the product's rows (multicasting W's), and
    as many ring slices as fit in shared memory (at most 8)."""
    if row_tiles < 1 or not 1 <= m <= row_tiles * SWAP_WIDTHS[-1]:
        raise ValueError(f"the transposed product takes 1 to {SWAP_WIDTHS[-1]} rows a tile, got M={m} in "
                         f"{row_tiles} tiles")
    width = next(w for w in (SWAP_WIDTHS if cluster_m == 1 else SWAP_PAIR_WIDTHS) if w * row_tiles >= m)
    stages = max(s for s in range(2, 9) if shared_mem_bytes("persistent", s, width, tile_m) <= MAX_BLOCK_SHARED)
    return PersistentBuild(group_m=8, cluster_m=cluster_m, cluster_n=cluster_n, tile_n=width, tile_m=tile_m,
                           stages=stages, b_k_major=True, swap_ab=True)


# The persistent rung launches as a programmatic dependent launch: its blocks start on the
# SMs the kernel before it leaves free and set up (barriers, tensor maps) while that kernel
# finishes; it waits for it before touching memory (gemm_hopper_persistent.cu). False: the
# plain stream order (the experiments' comparison point).
DEPENDENT_LAUNCH = True


# Long K turns the choice from smaller tiles to 128 x 128 with stream-K: those read a
# third fewer bytes from L2 a FLOP, and over a long main loop stream-K's partial sums (the
# 128 x 128 tiles leave half the SMs idle otherwise) cost little against that. On an H200
# (session 38, p258-p260; x cuBLAS, 128 x 64 -> 128 x 128 with stream-K): 1024^2 x 12288
# 0.77 -> 0.86, x 32768 0.68 -> 0.86; 768^2 x 16384 0.55 -> 0.64; 1024 x 512 x 12288
# 0.69 -> 0.78; 640^2 x 16384 0.64 -> 0.73; 896^2 x 16384 (w.T) 0.66 -> 0.77; below the
# rule's bounds the 128 x 64 tiles won or tied (1024^2 x 6144 0.73 against 0.69; 512^2 x
# 8192 0.73 against 0.61, x 12288 0.64 against 0.57: 16 tiles cut 8 ways), and at one
# tile row (M <= 128) throughout (128 x 4096 x 12288: 0.94 against 0.85). The same step
# from 128 x 128 to 256 x 256 cluster tiles at long K is not taken: it won where those
# tiles were at least a quarter of the clusters (1024 x 2048 x 16384 0.84 -> 0.89) and
# lost as often (4096 x 512 x 8192 0.86 -> 0.81, 1152 x 896 x 9216 0.77 -> 0.51) (unless
# rows are off the 32-byte sectors: below).
LONG_K_SLICES = 128           # slices of 64: K > 8128
LONG_K_WORK_PER_SM = 34       # 128 x 128 tile slices a SM at least (tiles x slices / SMs)
# ... unless a row of A or of B (as it lies) does not start on a 32-byte sector (K, or N for a
# row-major B, not a multiple of 16 elements): then each 128-byte box row touches five sectors,
# not four, the main loop reads a quarter more from L2, and the tiles that read the fewest L2
# bytes a FLOP win from a shorter K on: 128 x 256 in clusters of 2 (B read once per cluster)
# where they fill a third of the clusters, else 128 x 128 where those number 20. On an H200
# (session 49, CUDA-graph replay): 1280 x 1272 x 10240 ran 128 x 128 tiles at 0.62x cuBLAS
# where 1280 x 1280 x 10240 ran 0.91x, and 128 x 256 tiles at 0.87 and 0.84x (p313; with the
# edge of N on a 64-column chunk, 1280 x 1216, or with an edge in M, 128 x 128 lost nothing
# against 128 x 256). Over 114 long-K products (p308, p311, p312, p313) whose 128 x 256 tiles
# fill at most half the clusters, 128 x 256 ran 1.21-1.40x 128 x 128 in geometric mean with
# rows off the sectors and 0.88-0.94x with rows on them; 128 x 128 ran 1.21-1.27x the 64-row
# tiles off the sectors and 1.01-1.04x on them (the round products of sessions 38-39
# 0.81-0.94x). On 80 fresh products (p314, seeds 314 and 315)
# the rule ran 1.27x and 1.10x the rule before (0.608 -> 0.772x and 0.614 -> 0.677x cuBLAS), 35
# faster by more than 3 % (1.06-1.89x), 5 slower, all small ones whose 128 x 128 tiles were fewer
# than 20 (216 x 264 x 8120: 0.61x): since then 128 x 128 only from 20 such tiles on (set on
# those). On 80 more fresh products (p316, seeds 316 and 317): 1.22x and 1.21x the rule before
# (0.606 -> 0.741x and 0.616 -> 0.744x cuBLAS; the best measured plan 0.823x and 0.828x), 42
# faster by more than 3 % (1.07-2.04x), none slower by more than 3 %. Shorter K (p318: K
# 1024-6072): from 64 slices on, 0.703 -> 0.741x cuBLAS on seed 318 (fitted there: from 48 slices,
# 4 products slower by more than 3 %, from 16, 12), and on the held-out seed 319 0.689 -> 0.708x,
# 6 faster by more than 3 % (1.11-1.49x), one slower (134 x 2112 x 5000: 0.91x).
SECTOR_ELEMENTS = 16          # a 32-byte sector of bf16 / fp16
OFF_SECTOR_LONG_K_SLICES = 64  # slices of 64: K > 4032 (96 until p318)
OFF_SECTOR_WIDE_SHARE = 1 / 3  # 128 x 256 cluster tiles from this share of the clusters on
OFF_SECTOR_NARROW_SHARE = 0.15  # else 128 x 128 tiles from this share of the SMs on (20 of 132)


# One row of 2 x 1 clusters (129-256 rows) and long K: 128 x 256 tiles in clusters of 2 (B read
# once per cluster) from this many slices and this share of the clusters on (sessions 49-50's
# probes: the 15 products it changes ran 1.00-1.45x the rule's smaller tiles, at 12-16 cluster tiles
# and 97-296 slices; default_build's docstring)
ONE_CLUSTER_ROW_LONG_K_SLICES = 96
ONE_CLUSTER_ROW_WIDE_SHARE = 0.18
# ... and with rows off the 32-byte sectors (a quarter more L2 reads a slice: the tiles that read
# the fewest win sooner) from this share on (8 of 66; fitted on 10 products of p326 and session
# 49's probes at 8-11 cluster tiles, 8 of them faster, 0.93-1.38x; held out: p327, 30 products,
# 0.602 -> 0.664x cuBLAS, 1.10x in geometric mean, 5 slower by more than 3 %, 0.83-0.96x)
ONE_CLUSTER_ROW_OFF_SECTOR_SHARE = 0.12


# Rows on the sectors, a 128 x 128 tile (one block a cluster) runs at about this share of the
# rate of a 128 x 256 one (in clusters of 2) where both fill their waves more than 90 % as whole
# tiles: 0.68-1.05x, median 0.87, over 14 products of p308 and p322 (H200, session 50); set a
# little below the median, for the larger tiles (p323's held-out test ran with 0.85).
NARROW_RATE = 0.85


# The transposed product (swap_build) for b = w.T where its tile of the product's rows is at
# most SWAP_PAD_GAIN of the rows of 128-row tiles (M = 200: 208 of 256), or where the rule's own
# choice is not 128 x 256 tiles in clusters of 2 along M (at 113-128 rows its 128 x 256 tiles run
# one block a cluster, and its smaller tiles leave SMs idle: 117 x 4696 x 14256 in 128 x 64
# tiles, 1.57x slower), and where its cluster tiles hold SWAP_MIN_SLICES_PER_CLUSTER K slices a
# cluster or more (below, the rule's smaller tiles and stream-K won: 200 x 4096 x 4096, 16 cluster
# tiles of 64 slices, 0.68 against 0.85x cuBLAS). On an H200 (session 56, CUDA-graph replay,
# x @ w.T against the rule before it; p380-p384): over 298 random products of 65-256 rows, N
# 1024-32768, K 768-16384, with padding saved 1.15x in geometric mean from 24 slices a cluster
# on (189 products, 2 slower by more than 3 %), 0.95x at 20-24 (4 products) and 0.92-1.16x below;
# without padding saved and the rule's choice not 128 x 256 pairs, 1.10x on the sectors (35, 3
# slower) and 1.21x off them (23); where it is such pairs (241-256 rows) 0.99x, so not there.
# Held out (p383, seed 389, 60 fresh random products): 0.910 -> 1.020x cuBLAS, 1.17x on the 44
# changed, 2 slower by more than 3 % (192 x 7232 x 3888 0.88x). 7-8B models' and GPT-2's layers
# (p384, with the 64-row blocks below) at 100-224 rows 0.77-0.88 -> 0.88-0.95x; at 120 rows (no
# padding saved) 0.932 -> 0.933x (its LM head 0.93x the rule before, Qwen2's gate-up 1.24x).
# Above 256 rows, in the fewest tiles of the product's rows (at most 256 each), where the rule's
# choice is 128 x 256 pairs, whose 256-row cluster tiles compute 512 rows for M = 300 (the
# transposed product 320 in two tiles of 160), and the tiles save SWAP_PAD_GAIN of those rows. On
# an H200 (session 57, p387-p389, CUDA-graph replay, the same process): by the share of rows
# computed, over 127 products of 257-1200 rows the rule gave 128 x 256 pairs, against them,
# 1.22x in geometric mean at up to 0.7 of the rows, 1.17x at 0.7-0.8, 1.07x at 0.8-0.9, 1.01x at
# 0.93-0.95, 1.00x above; the layers at 300 rows 0.59-0.73 -> 0.77-0.98x cuBLAS. Held out: 80
# random products of 257-1200 rows (seed 395) 0.765 -> 0.781x cuBLAS, 41 changed 1.04x, 5 slower
# by more than 3 % (0.94-0.96x, at 0.81-0.94 of the rows); the layers at 384-1024 rows 0.816 ->
# 0.846x, 30 changed 1.135x, one slower by 3 % (640 x 3072 x 8192). Where the rule's choice
# there is a smaller tile (few tiles) it won at long K and lost at short (300-448 x 4096 x
# 11008-18944 1.10-1.36x, 384-512 x 4096 x 4096 0.78-0.88x): not taken there.
SWAP_PAD_GAIN = 0.95
SWAP_MIN_SLICES_PER_CLUSTER = 24
# Where neither pays and the rule chose one of its smaller tiles (few of them): the transposed
# product in 64-row blocks of W, one block a cluster (x's whole slice read by every block: it
# lost on large products and with rows off the sectors, 0.53-0.74x the rule's choice over
# p382-p383's), for rows on the sectors, at most this many rows, padding saved (SWAP_PAD_GAIN),
# this many K slices, at most half as many blocks as SMs and this many K slices an SM. Fitted
# on 28 products (p380's layers and p382-p383's random ones, H200, session 56): 1.18x in
# geometric mean, one slower by more than 3 % (225 x 3792 x 3360, 0.94x); 200 x 4096 x 4096
# 1.06x, 100 x 3072 x 8192 1.35x. Held out on 40 products it took (p385, seed 390) 1.07x, 9
# slower by more than 3 %, all but two below 64 slices (0.71-0.97x) or at 113-128 rows, where
# it saves no padding (as 120 x 4096 x 4096, 0.90x, p384): hence those two conditions, under
# which the same 40 keep 23 at 1.16x. Held out again (p385, seed 391, 40 products): 1.15x, 5
# slower by more than 3 % (0.85-0.94x), all of N 600-920 (10-15 blocks of W's rows): hence the
# floor of 16 blocks (set on those, not held out again), above which the 33 others ran 1.19x,
# none slower by more than 3 %.
SWAP_SMALL_MAX_ROWS = 240
SWAP_SMALL_MIN_SLICES = 64
SWAP_SMALL_MIN_BLOCKS = 16
SWAP_SMALL_MIN_SLICES_PER_SM = 8
# Where K is a multiple of 64 (each row of x and w starts a 128-byte line), the transposed
# product in 64-row blocks of W (one tile of at most 256 of the product's rows each, or the
# fewest such tiles) beats the pairs above wherever their runs are shorter than
# SWAP_64_ROWS_MAX_PAIR_RUN slices a cluster, and the rule's other builds, in one wave (more
# tiles than half the SMs, at most as many, SWAP_ONE_WAVE_MIN_SLICES slices or more) and, in
# the place of the pairs or of 128 x 256 pairs, at most half a wave (the floors of SWAP_SMALL_*).
# Where K is not, each block's read of x's whole slice (over twice the L2 bytes a FLOP of the
# pairs) straddles two lines a row and they lose. On an H200 (session 57, CUDA-graph replay; p387-p389): 200 x 6144 x 4096
# (Llama-3-8B's qkv) 0.72 -> 0.94x cuBLAS, at 129-250 rows 1.03-1.29x the rule; against the pairs
# on 60 random products of 129-240 x 4224-8448, 1.02-1.29x on each of the 10 whose K is a multiple
# of 64 and 0.68-0.99x on each of the 50 others; the pairs' runs of 69 slices 0.89x (151 x 5352 x
# 13952); above 256 rows in place of the rule's 64-row tiles 0.84x (300 x 3072 x 8192: as many
# rows computed), of its 128-row ones 1.04-1.33x (the layers at 300-512 rows). Held out (K
# multiples of 64, the rule before the session in the same process): seed 398 (40 products of
# 65-256 x 4224-8448) 0.826 -> 0.886x cuBLAS with the one wave alone; seeds 400-401 (60 of 257-768
# rows, with the pairs above) 0.712 -> 0.792x and 0.772 -> 0.848x, four slower by more than 3 %
# (374 x 2416 x 10944 0.79x, 608 x 1432 x 14848 0.80x: long K, tiles just over half the SMs, where
# as many such won, 407 x 2392 x 11008 1.34x); the final rule (below half a wave and from 32
# slices added): seeds 402-404 (100 products of 65-768 rows) 0.824 -> 0.862x, 0.795 -> 0.831x,
# 0.762 -> 0.832x, 57 changed, 3 slower by 3-4 %; the layers at 129-300 rows 0.803 -> 0.841x, 31
# changed 1.17x, none slower. In place of 128 x 256 pairs at most half a wave (the rule's
# one-cluster-row choice at long K; added last, fitted on p387's 3072 x 8192 layers at 129-250
# rows, 1.12-1.51x): held out on seed 405 (30 products of 129-256 x 3072-4224 x 6144-16384) 0.850
# -> 0.915x cuBLAS against the rule without it, 10 changed, 1.03-1.50x, none slower.
LINE_ELEMENTS = 64   # a 128-byte line of bf16 / fp16
SWAP_64_ROWS_MAX_PAIR_RUN = 60
SWAP_ONE_WAVE_MIN_SLICES = 32
SWAP_64_ROWS_MAX_ROWS = 768   # (measured up to here)
# Where 128 x 256 pairs' cluster tiles fill the GPU poorly (48 of them on 66 clusters at 768 x 4096,
# whole: 0.73 of the clusters busy), the transposed product in 128-row blocks, one block a cluster,
# in one more tile of the product's rows than the fewest (768 rows: four of 192, 128 tiles on 132
# SMs) keeps more of it busy; taken with K a multiple of 64, where it keeps SWAP_FILL_GAIN more of
# the GPU busy (_filled_share: stream-K counts as full) with whole tiles (dealt out as K runs it
# lost: 6 of 30 products of seed 406 0.85-0.96x, all so), at 257-SWAP_FILL_MAX_ROWS rows. On an
# H200 (session 57, CUDA-graph replay): the layers at 512-1024 rows 1.15-1.33x the pairs (768 x
# 4096 x 11008 1.33x; p389); seed 406's other 24 products, 1.19-1.47x where whole. Held out (seed
# 408, 40 random products of 257-1024 rows it takes): 0.706 -> 0.907x cuBLAS, 1.28x in geometric
# mean, 1.14x the least.
SWAP_FILL_GAIN = 0.1
SWAP_FILL_MAX_ROWS = 1024

# The rule's last step (:func:`_fills_sooner`): a build whose tiles run whole and end FILL_GAIN sooner
# by the wave model (:func:`_wave_time`) than the rule's, from FILL_MIN_ROWS rows on. First with 128 x
# 192 tiles only (PERSISTENT_192, PERSISTENT_192_PAIR). On an H200 (session 59,
# p400: Llama-class layers at 256-4096 rows and 40 random products of 257-4096, both layouts of b):
# where the 192-wide tiles ran whole, the model's gain and the measured one agreed within 0.07 (512 x
# 6144 x 4096: 1.33 predicted, 1.19x measured; 640 x 4096 x 14336 1.17 and 1.16x; 2956 x 13248 x 5888
# 1.03 and 1.02x); where the 192-wide tiles would be dealt out as K runs, the model (ideal runs)
# promised up to 1.38x and they ran 0.74-1.03x: those are not taken. Pairs where one block a cluster
# would be dealt out (their waves are coarser: the model prefers single blocks on a tie, which ran
# as fast or faster, 1024 x 3072 x 768 1.05 against 1.00x). From FILL_MIN_ROWS rows on, the
# fewest measured there: held out (p401, seed 402: 40 random products of 129-4096 rows where the rule
# changed, both layouts), 1.095x the rule before in geometric mean, 0.869 -> 0.952x cuBLAS (b = w.T),
# every one of the 39 from 256 rows on faster (1.035-1.32x); below, 195 x 11968 x 10176 ran 0.90x (in
# place of the transposed product's one 208-row tile) and 209 x 9024 x 3648 1.15x: not taken there.
# That form counted stream-K's runs as ideal; with STREAM_K_RATE (fitted on p400 after seed 402 was
# measured), held out again (p401, seed 403: 40 random products of 129-4096 rows where the rule
# changed, 16 % of those drawn): 1.109x (w.T) and 1.107x (row-major) the rule before in geometric
# mean, 0.865 -> 0.960x and 0.863 -> 0.955x cuBLAS, the least 0.977x, none slower by more than 3 %.
# Then the transposed product in 128-row blocks of W, one block a cluster, in t, t + 1 and t + 2 tiles
# of the product's rows joined the candidates (cuBLAS runs 640 x 4096 x 14336 in 128 x 160 tiles, 128
# of them, ncu p403: 1.17x the 128 x 192 tiles' 110 blocks), their narrow tiles at NARROW_SWAP_RATES,
# and the pairs left the rule (a swap candidate ended sooner wherever it would have taken them). On
# the 112 products of p404 it was fitted on, 12 changed, 1.01-1.23x. Held out (p405, seed 405: 60
# random products of 256-4096 rows where this step changes the rule of session 58, 36 % of those
# drawn): 1.101x (w.T) and 1.103x (row-major) in geometric mean, 0.877 -> 0.965x and 0.869 -> 0.959x
# cuBLAS; the 32 taking 128 x 192 tiles 1.100x (the least 1.014x), the 28 taking the transposed
# product in more row tiles 1.101x (the least 0.958x: 475 x 10624 x 14400 in 160-wide tiles, the one
# slower by more than 3 %).
FILL_GAIN = 1.05
FILL_MIN_ROWS = 256
# What the transposed product's tiles of 160-176 and of 80-144 columns get done, area for area,
# against those of 192 or more (the wave model's rates: :func:`_width_rate`). On an H200 (p404: 64
# Llama-class layers at 256-2048 rows and 48 random products of 256-2048, b = w.T, each tile width in
# 128-row blocks of W against the rule): measured over predicted gain, median by width, 192-256
# 1.00-1.01, 160 0.92, 176 0.94, 144 0.87, 128 0.96, 112 0.84, 96 0.87, 80 0.85; set below the medians
# (0.93 and 0.86 took 300 x 28672 x 4096 to 80-wide tiles on a predicted 1.06x, and of the 17 they
# changed there 3 ran 1.00-1.02x).
NARROW_SWAP_RATES = (0.9, 0.8)
# What stream-K's K runs get done against whole tiles, area for area (the wave model's rate for
# the tiles stream_k deals out). On an H200 (p400, 29 products whose rule dealt tiles out in 128 x
# 256 pairs or the transposed product, against 128 x 192 whole tiles): 0.69-0.91, median 0.79 (one
# at 1.4 with 81 of 741 tiles dealt out); with ideal runs (rate 1) the model missed 1.15-1.23x gains
# at 1024-1536 x 4096-6144 x 4096 and 512 x 12288 x 4096.
STREAM_K_RATE = 0.8


def rows_on_sectors(n: int, k: int, b_transposed: bool = False) -> bool:
    """Whether every row of A (K elements) and of B as it lies (N elements; K for b = w.T)
    starts on a 32-byte sector."""
    return k % SECTOR_ELEMENTS == 0 and (b_transposed or n % SECTOR_ELEMENTS == 0)


def default_build(m: int, n: int, k: int, sms: int, b_transposed: bool = False) -> PersistentBuild:
    """The persistent rung's build for an (m, k) @ (k, n) product on a GPU of ``sms`` SMs
    (``b_transposed``: b is w.T of a row-major (N, K) w).

    128 x 256 tiles where they fill more than half of the GPU's clusters (of 2 blocks, or of
    one for at most 128 rows: no block of a cluster on rows past the end). Else the largest
    of three tile sizes whose tiles fill more than half of the SMs: 128 x 128; 64 x 128 (128
    x 64 for 65-128 rows: one tile row, each B column read by one block); 64 x 64. Where M
    is an odd number of 64-row blocks, 64 x 128 takes 128 x 128's place (no padded tile row)
    if its tiles fit one wave.
    Long K turns the choice to the larger tiles with stream-K: the first of the three sizes
    (128 x 128, or 64 x 128 for an odd number of 64-row blocks) under the long-K rule
    (LONG_K_SLICES, LONG_K_WORK_PER_SM; more than one tile row), and never 64 x 64 from
    LONG_K_SLICES on above 64 rows (they read twice the L2 bytes a FLOP of 128 x 128).
    Where rows of A or B do not start on 32-byte sectors (:func:`rows_on_sectors`), from
    OFF_SECTOR_LONG_K_SLICES on above one tile row: 128 x 256 tiles where they fill a third
    of the clusters, else 128 x 128 where those number 15 % of the SMs (OFF_SECTOR_NARROW_SHARE),
    else as above.
    Tiles too short for stream-K (fewer than MIN_SPLIT_SLICES slices) with rows on the sectors
    above one tile row: 128 x 128 in the place of 128 x 256 where its waves end sooner
    (:func:`_narrow_ends_sooner`). On an H200 (session 50): 8192 x 768 x 768 and 2048 x 3072 x 768
    1.57x (p322); on 40 held-out random products of K 256-960 on the sectors (p323, seed 323),
    with stream_k's floor of the same session, 0.830 -> 0.884x cuBLAS (the best measured plan
    0.894x); the 7 whose tiles this turned to 128 x 128 1.25x in geometric mean, 0.90-1.65x
    (3521 x 5904 x 944, 15 slices: 0.90x).
    One row of 2 x 1 clusters (129-256 rows) from ONE_CLUSTER_ROW_LONG_K_SLICES slices on,
    where 128 x 256 tiles number ONE_CLUSTER_ROW_WIDE_SHARE of the clusters or more (rows off
    the sectors: ONE_CLUSTER_ROW_OFF_SECTOR_SHARE, held out on p327's 30 products at 8-11
    cluster tiles: 0.602 -> 0.664x cuBLAS, 5 slower by more than 3 %): those
    tiles (B read once per cluster, not once per tile row; their stream-K keeps the SMs
    busy). On an H200 (session 50): fitted on 15 products of sessions 49-50's probes that it
    changes (1.00-1.45x, none slower); on 40 held-out random products of 129-256 rows and K
    4096-16384 (p326, seed 326) 0.670 -> 0.717x cuBLAS with rows on the sectors and 0.663 ->
    0.727x off them, 18 changed, 2 slower by more than 3 % (155 x 4896 x 9152: 0.86x; 188 x
    5008 x 7408: 0.96x), 157 x 4296 x 10312 1.84x.
    Where all of the above gives 128 x 128 tiles one block a cluster to one row of clusters
    (129-256 rows): the same tiles in clusters of 2 sharing B (PERSISTENT_NARROW_PAIR; p335:
    1.15x on 40 held-out products).
    For b = w.T above 64 rows, the transposed product (:func:`swap_build`) in its place: in
    64-row blocks of W where K is a multiple of 64 (:func:`_64_row_blocks_on_lines_pay`), else
    in pairs where they save padding or fill the GPU better (:func:`_swap_pays`), else in 128-row blocks
    in one more tile of rows where 128 x 256 pairs fill the GPU poorly
    (:func:`_more_row_tiles_fill_better`), else in fewer 64-row blocks
    (:func:`_swap_in_64_row_blocks_pays`); the SWAP_* constants say where each was measured.
    For a row-major b, the same transposed product where b = w.T takes it, reading b MN-major
    (``a_mn_major``; session 58, p396, an H200: where the w.T rule swaps, 59 products of
    Llama-class layers and random shapes at 65-1024 rows ran 1.15x the unswapped rule in
    geometric mean, 0.94x the least, one slower by more than 3 %).
    Last, for either layout, 128 x 192 tiles in place of all that where their whole waves end
    sooner, or the transposed product in more tiles of the product's rows
    (:func:`_fills_sooner`; session 59)."""
    as_w_t = _w_t_rule(m, n, k, sms)
    if b_transposed:
        chosen = as_w_t
    else:
        chosen = dataclasses.replace(as_w_t, a_mn_major=True) if as_w_t.swap_ab else unswapped_build(m, n, k, sms)
    return _fills_sooner(m, n, k, sms, chosen, b_transposed) or chosen


def _wave_time(m: int, n: int, k: int, sms: int, build: PersistentBuild) -> float:
    """The wave model of ``build``'s time for an (m, k) @ (k, n) product, in block-tile areas
    (rows x columns) one SM computes: whole tiles take ceil(tiles / clusters) waves of one
    tile each; tiles that stream_k deals out as K runs, their share of all SMs at
    STREAM_K_RATE; the transposed product's tiles narrower than 192 at their
    :func:`_width_rate`."""
    tiles, clusters = cluster_tiles(m, n, build), sms // build.cluster
    area = build.tile_m * build.tile_n / _width_rate(build)
    sk_tiles = stream_k(tiles, clusters, -(-k // BK), build.cluster)[0]
    if sk_tiles:
        return (tiles - sk_tiles) // clusters * area + sk_tiles * build.cluster * area / (sms * STREAM_K_RATE)
    return -(-tiles // clusters) * area


def _width_rate(build: PersistentBuild) -> float:
    """What the transposed product's tile gets done, area for area, against one 192 or more
    wide (NARROW_SWAP_RATES); 1 for every other build."""
    if not build.swap_ab or build.tile_n >= 192:
        return 1.0
    return NARROW_SWAP_RATES[0] if build.tile_n >= 160 else NARROW_SWAP_RATES[1]


def _fills_sooner(m: int, n: int, k: int, sms: int, chosen: PersistentBuild, b_transposed: bool
                  ) -> PersistentBuild | None:
    """The last step of default_build, from FILL_MIN_ROWS rows on: of 128 x 192 tiles (one block a
    cluster) and the transposed product in 128-row blocks of W, one block a cluster, in t, t + 1
    or t + 2 tiles of the product's rows (t the fewest), those whose tiles run whole (stream_k
    deals none out), the one that ends soonest by :func:`_wave_time` (the 192-wide tiles on a
    tie), in place of ``chosen`` where it ends FILL_GAIN sooner; None where none does."""
    if m < FILL_MIN_ROWS:
        return None
    t = swap_row_tiles(m)
    candidates = [as_laid_out(b, b_transposed) for b in (
        PERSISTENT_192, *(swap_build(m, BM, 1, rows) for rows in (t, t + 1, t + 2)
                          if 64 * rows < m <= SWAP_WIDTHS[-1] * rows))]
    times = {b: _wave_time(m, n, k, sms, b) for b in candidates if not _filled_share(m, n, k, sms, b)[1]}
    if not times:
        return None
    best = min(times, key=times.__getitem__)  # (the first of equals: the 192-wide tiles)
    return best if times[best] <= _wave_time(m, n, k, sms, chosen) / FILL_GAIN else None


def _w_t_rule(m: int, n: int, k: int, sms: int) -> PersistentBuild:
    """:func:`default_build` for b = w.T: the transposed product where one of its regimes
    pays, else the unswapped build."""
    unswapped = unswapped_build(m, n, k, sms, True)
    pairs_pay = _swap_pays(m, n, k, sms, unswapped)
    if _64_row_blocks_on_lines_pay(m, n, k, sms, unswapped, pairs_pay):
        return swap_build(m, 64, 1, swap_row_tiles(m))
    if pairs_pay:
        return swap_build(m, row_tiles=swap_row_tiles(m))
    if unswapped == PERSISTENT and _more_row_tiles_fill_better(m, n, k, sms):
        return swap_build(m, BM, 1, swap_row_tiles(m) + 1)
    if _swap_in_64_row_blocks_pays(m, n, k, sms, unswapped):
        return swap_build(m, 64, 1)
    return unswapped


def _swap_in_64_row_blocks_pays(m: int, n: int, k: int, sms: int, unswapped: PersistentBuild) -> bool:
    """For b = w.T where the transposed product in pairs does not pay and the unswapped build
    is one of the smaller tiles: whether the transposed product in 64-row blocks of W, one
    block a cluster, takes its place: rows of x and w on the 32-byte sectors, 65 to
    SWAP_SMALL_MAX_ROWS rows, its width at most SWAP_PAD_GAIN of the rows 128-row tiles
    compute, SWAP_SMALL_MIN_SLICES K slices or more, SWAP_SMALL_MIN_BLOCKS 64-row blocks of W
    or more but at most half as many as SMs (stream-K then cuts each into K runs), and
    SWAP_SMALL_MIN_SLICES_PER_SM K slices an SM or more."""
    slices = -(-k // BK)
    if not (64 < m <= SWAP_SMALL_MAX_ROWS and rows_on_sectors(n, k, True) and slices >= SWAP_SMALL_MIN_SLICES):
        return False
    if unswapped not in SMALLER_BUILDS or not _saves_padding(swap_build(m, 64, 1), m):
        return False
    blocks = -(-n // 64)
    return (SWAP_SMALL_MIN_BLOCKS <= blocks and 2 * blocks <= sms
            and blocks * slices >= SWAP_SMALL_MIN_SLICES_PER_SM * sms)


def _64_row_blocks_on_lines_pay(m: int, n: int, k: int, sms: int, unswapped: PersistentBuild,
                                pairs_pay: bool) -> bool:
    """For b = w.T with rows of x and w on 128-byte lines (K a multiple of 64): whether the
    transposed product in 64-row blocks of W, one block a cluster, in :func:`swap_row_tiles`
    tiles of the product's rows, takes the place of every other build, at 65 to
    SWAP_64_ROWS_MAX_ROWS rows (above 256 only where the ``unswapped`` build's tiles are 128
    rows: in place of 64-row ones it computes about as many rows), where the transposed
    product in pairs does not run (not ``pairs_pay``) or would run fewer than
    SWAP_64_ROWS_MAX_PAIR_RUN K slices a cluster (its cluster tiles' slices over the
    clusters: longer runs, and the pairs' stream-K over every SM, pay), and
      - in one wave: more tiles than half the SMs and at most as many (stream-K leaves them
        whole), SWAP_ONE_WAVE_MIN_SLICES K slices or more;
      - or, in the place of the pairs or of the rule's 128 x 256 pairs (:data:`PERSISTENT`),
        at most half a wave (stream-K then cuts each tile into K runs): at most 256 rows, the
        SWAP_SMALL_* floors of blocks, slices and slices an SM."""
    if not (64 < m <= SWAP_64_ROWS_MAX_ROWS and k % LINE_ELEMENTS == 0):
        return False
    if m > SWAP_WIDTHS[-1] and unswapped.tile_m != BM:
        return False
    slices = k // BK
    tiles = -(-n // 64) * swap_row_tiles(m)
    if pairs_pay and _pairs_slices_a_cluster(m, n, k, sms) >= SWAP_64_ROWS_MAX_PAIR_RUN:
        return False
    if sms < 2 * tiles <= 2 * sms:
        return slices >= SWAP_ONE_WAVE_MIN_SLICES
    return ((pairs_pay or unswapped == PERSISTENT) and m <= SWAP_WIDTHS[-1] and SWAP_SMALL_MIN_BLOCKS <= tiles
            and 2 * tiles <= sms
            and slices >= SWAP_SMALL_MIN_SLICES and tiles * slices >= SWAP_SMALL_MIN_SLICES_PER_SM * sms)


def _filled_share(m: int, n: int, k: int, sms: int, build: PersistentBuild) -> tuple[float, bool]:
    """The share of the GPU's clusters that ``build``'s tiles keep busy over their waves (1
    where stream-K deals tiles out), and whether it deals them out."""
    tiles, clusters = cluster_tiles(m, n, build), sms // build.cluster
    sk_tiles, _ = stream_k(tiles, clusters, -(-k // BK), build.cluster)
    return (1.0 if sk_tiles else tiles / (-(-tiles // clusters) * clusters)), sk_tiles > 0


def _more_row_tiles_fill_better(m: int, n: int, k: int, sms: int) -> bool:
    """For b = w.T in place of 128 x 256 pairs: whether the transposed product in 128-row
    blocks, one block a cluster, in one more tile of the product's rows than the fewest, keeps
    SWAP_FILL_GAIN more of the GPU busy (:func:`_filled_share`) with whole tiles, at 257 to
    SWAP_FILL_MAX_ROWS rows, K a multiple of 64."""
    if not (SWAP_WIDTHS[-1] < m <= SWAP_FILL_MAX_ROWS and k % LINE_ELEMENTS == 0):
        return False
    more_share, dealt_out = _filled_share(m, n, k, sms, swap_build(m, BM, 1, swap_row_tiles(m) + 1))
    if dealt_out:  # (whole tiles only: SWAP_FILL_GAIN's comment)
        return False
    return more_share >= _filled_share(m, n, k, sms, PERSISTENT)[0] + SWAP_FILL_GAIN


def unswapped_build(m: int, n: int, k: int, sms: int, b_transposed: bool = False) -> PersistentBuild:
    """default_build's choice but for the transposed product (the experiments' comparison
    point for it)."""
    chosen = _build_by_fill(m, n, k, sms, b_transposed)
    if chosen == PERSISTENT_NARROW and BM < m <= PERSISTENT.cluster_m * BM:
        return PERSISTENT_NARROW_PAIR
    return chosen


def swap_row_tiles(m: int) -> int:
    """The transposed product's tiles along the product's rows: the fewest that hold them."""
    return -(-m // SWAP_WIDTHS[-1])


def _pairs_slices_a_cluster(m: int, n: int, k: int, sms: int) -> float:
    """K slices a cluster of the transposed product in pairs (:func:`swap_build` in
    :func:`swap_row_tiles` tiles of rows): its cluster tiles' slices over the GPU's clusters."""
    pairs = swap_build(m, row_tiles=swap_row_tiles(m))
    return cluster_tiles(m, n, pairs) * -(-k // BK) / (sms // pairs.cluster)


def _swap_pays(m: int, n: int, k: int, sms: int, unswapped: PersistentBuild) -> bool:
    """For b = w.T: whether the transposed product (:func:`swap_build`, in clusters of 2, in
    :func:`swap_row_tiles` tiles along the product's rows) takes the place of the
    ``unswapped`` build: above 64 rows (the skinny kernel's below), where its tiles of the
    product's rows compute at most SWAP_PAD_GAIN of the rows the unswapped build does
    (:func:`_saves_padding`) or, at most 256 rows, the unswapped build is not 128 x 256
    tiles in clusters of 2 along M (which share B as the transposed product's pairs share the
    activations), and where its cluster tiles hold SWAP_MIN_SLICES_PER_CLUSTER slices a
    cluster or more. Above 256 rows only in the place of those 128 x 256 pairs."""
    if m <= 64 or (m > SWAP_WIDTHS[-1] and unswapped != PERSISTENT):
        return False
    if unswapped == PERSISTENT and not _saves_padding(swap_build(m, row_tiles=swap_row_tiles(m)), m):
        return False  # (128 x 256 tiles in pairs along M)
    return _pairs_slices_a_cluster(m, n, k, sms) >= SWAP_MIN_SLICES_PER_CLUSTER


def _saves_padding(swapped: PersistentBuild, m: int) -> bool:
    """Whether the transposed product's tiles of the product's rows compute at most
    SWAP_PAD_GAIN of the rows that 128-row tiles compute for M = ``m`` (up to 256 rows), or
    of those the 256-row cluster tiles of 128 x 256 pairs compute (above)."""
    computed = -(-m // swapped.tile_n) * swapped.tile_n
    return computed <= SWAP_PAD_GAIN * _round_up(m, BM if m <= 2 * BM else 2 * BM)


def _build_by_fill(m: int, n: int, k: int, sms: int, b_transposed: bool) -> PersistentBuild:
    """default_build's choice by how much of the GPU each build's tiles fill (its docstring
    says how), before one row of clusters turns 128 x 128 tiles to pairs sharing B."""
    wide = PERSISTENT_ONE_ROW if m <= BM else PERSISTENT
    tiles = cluster_tiles(m, n, wide)
    clusters = sms // wide.cluster
    slices = -(-k // BK)
    on_sectors = rows_on_sectors(n, k, b_transposed)
    if 2 * tiles > clusters:
        if m > BM and slices < MIN_SPLIT_SLICES and on_sectors and _narrow_ends_sooner(m, n, sms, tiles, clusters):
            return PERSISTENT_NARROW
        return wide
    one_cluster_row = BM < m <= wide.cluster_m * BM
    if one_cluster_row and slices >= ONE_CLUSTER_ROW_LONG_K_SLICES:
        share = ONE_CLUSTER_ROW_WIDE_SHARE if on_sectors else ONE_CLUSTER_ROW_OFF_SECTOR_SHARE
        if tiles >= clusters * share:
            return wide
    if m > BM and slices >= OFF_SECTOR_LONG_K_SLICES and not on_sectors:
        if tiles >= clusters * OFF_SECTOR_WIDE_SHARE:
            return wide
        if cluster_tiles(m, n, PERSISTENT_NARROW) >= sms * OFF_SECTOR_NARROW_SHARE:
            return PERSISTENT_NARROW
    odd_rows = -(-m // 64) % 2 == 1 and cluster_tiles(m, n, PERSISTENT_M64_N128) <= sms
    top = PERSISTENT_M64_N128 if odd_rows else PERSISTENT_NARROW
    if 2 * cluster_tiles(m, n, top) > sms:
        return top
    long_k = slices >= LONG_K_SLICES
    if m > BM and long_k and cluster_tiles(m, n, PERSISTENT_NARROW) * slices >= LONG_K_WORK_PER_SM * sms:
        return top
    middle = PERSISTENT_SMALL if 64 < m <= BM else PERSISTENT_M64_N128
    if 2 * cluster_tiles(m, n, middle) > sms or (long_k and m > 64):
        return middle
    return PERSISTENT_M64_N64


def _narrow_ends_sooner(m: int, n: int, sms: int, wide_tiles: int, clusters: int) -> bool:
    """For tiles too short to deal out as K runs (stream_k): whether whole 128 x 128 tiles
    end sooner than whole 128 x 256 cluster tiles, each counted in waves (a last wave part
    empty counts whole), the smaller tiles at NARROW_RATE."""
    wide_waves = -(-wide_tiles // max(1, clusters)) * 2  # (a 128 x 256 tile is two 128 x 128 ones' work)
    narrow_waves = -(-cluster_tiles(m, n, PERSISTENT_NARROW) // max(1, sms))
    return narrow_waves / NARROW_RATE < wide_waves


# The rule's smaller tiles (default_build below 128 x 256)
SMALLER_BUILDS = (PERSISTENT_NARROW, PERSISTENT_NARROW_PAIR, PERSISTENT_SMALL, PERSISTENT_M64_N128, PERSISTENT_M64_N64)

# The builds scripts/hopper-gemm-sweep measures (the CPU tests compile each one).
SWEEP_BUILDS = (
    PersistentBuild(),                                       # the design of the .cu header
    PersistentBuild(group_m=4),
    PersistentBuild(group_m=16),
    PersistentBuild(tile_order="hilbert"),
    PersistentBuild(stmatrix=True),
    PersistentBuild(tile_order="hilbert", stmatrix=True),
    PersistentBuild(cluster_n=2),                            # 2 x 2: A multicast too
    PersistentBuild(cluster_n=2, tile_order="hilbert", stmatrix=True),
    PersistentBuild(cluster_m=4, group_m=4),                 # 4 x 1: B read once per 4 blocks
    PERSISTENT_ALONG_N,                                      # 1 x 2: A multicast, 128 x 512 cluster tiles
    PERSISTENT_NARROW,                                       # 128 x 128 block tiles, 6 slices, one block a cluster
    PERSISTENT_NARROW_PAIR,                                  # the same in clusters of 2 sharing B
    PERSISTENT_SMALL,                                        # 128 x 64 block tiles, 8 slices, one block a cluster
    PERSISTENT_M64_N128,                                     # 64-row tiles: one consumer warpgroup
    PERSISTENT_M64_N64,
)


# --------------------------------------------------------------------------- tensor maps
SWIZZLE_BYTES = {"none": 0, "32B": 32, "64B": 64, "128B": 128}


@dataclasses.dataclass(frozen=True)
class TensorMapArgs:
    """The arguments of cuTensorMapEncodeTiled for one row-major 2-D matrix.

    Dimensions are innermost first, as the driver wants them: ``global_dims =
    (columns, rows)``, ``global_strides = (row pitch in bytes,)`` (rank - 1 entries),
    ``box_dims = (box columns, box rows)``.
    """

    data_type: str  # "bfloat16" | "float16"
    rank: int
    global_address: int
    global_dims: tuple[int, ...]
    global_strides: tuple[int, ...]
    box_dims: tuple[int, ...]
    element_strides: tuple[int, ...]
    interleave: str = "none"
    swizzle: str = "128B"
    l2_promotion: str = "256B"
    oob_fill: str = "zero"  # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: out-of-bounds elements read as 0

    @property
    def box_bytes(self) -> int:
        n = ELEM
        for d in self.box_dims:
            n *= d
        return n


def tensor_map_args(name: str, address: int, rows: int, cols: int, dtype: str, box_rows: int, box_cols: int,
                    *, swizzle: str = "128B", pitch_cols: int | None = None) -> TensorMapArgs:
    """cuTensorMapEncodeTiled's arguments for the row-major (rows, cols) matrix ``name``
    at ``address``, read or written in boxes of (box_rows, box_cols); ValueError names
    the constraint a matrix breaks. ``pitch_cols``: the elements from one row to the next,
    where the rows are padded (default ``cols``); TMA clips at ``cols``."""
    if dtype not in DTYPES:
        raise ValueError(f"{name}: the Hopper GEMM takes bfloat16 or float16, got {dtype}")
    if rows < 1 or cols < 1:
        raise ValueError(f"{name} is empty ({rows} x {cols})")
    if rows >= 2**32 or cols >= 2**32:
        raise ValueError(f"{name}: a tensor-map dimension must be below 2^32, got {rows} x {cols}")
    if address % 16:
        raise ValueError(f"{name} must be 16-byte aligned for TMA (address % 16 = {address % 16}); copy it")
    if pitch_cols is not None and pitch_cols < cols:
        raise ValueError(f"{name}: rows of {pitch_cols} elements cannot hold {cols} columns")
    pitch = (cols if pitch_cols is None else pitch_cols) * ELEM
    if pitch % 16:
        raise ValueError(
            f"{name} has {cols} columns: a row must be a multiple of 16 bytes for TMA, "
            f"so the column count must be a multiple of 8"
        )
    if pitch >= 2**40:
        raise ValueError(f"{name}: the row pitch must be below 2^40 bytes")
    if not (1 <= box_rows <= 256 and 1 <= box_cols <= 256):
        raise ValueError(f"{name}: box sides must be 1..256, got {box_rows} x {box_cols}")
    if (box_cols * ELEM) % 16:
        raise ValueError(f"{name}: the box's inner side must be a multiple of 16 bytes, got {box_cols * ELEM}")
    if swizzle not in SWIZZLE_BYTES:
        raise ValueError(f"swizzle must be one of {', '.join(SWIZZLE_BYTES)}, got {swizzle!r}")
    if SWIZZLE_BYTES[swizzle] and box_cols * ELEM > SWIZZLE_BYTES[swizzle]:
        raise ValueError(f"{name}: with {swizzle} swizzle the box's inner side must be <= {SWIZZLE_BYTES[swizzle]} "
                         f"bytes, got {box_cols * ELEM}")
    return TensorMapArgs(dtype, 2, int(address), (int(cols), int(rows)), (int(pitch),), (int(box_cols), int(box_rows)),
                         (1, 1), swizzle=swizzle)


def encode_tensor_map(args: TensorMapArgs) -> bytes:
    """The 128-byte CUtensorMap for ``args`` (cuda.bindings' cuTensorMapEncodeTiled)."""
    from cuda.bindings import driver as d

    dtype = {"bfloat16": d.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
             "float16": d.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16}[args.data_type]
    interleave = {"none": d.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE}[args.interleave]
    swizzle = {"none": d.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
               "32B": d.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_32B,
               "64B": d.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_64B,
               "128B": d.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B}[args.swizzle]
    l2 = {"none": d.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_NONE,
          "128B": d.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
          "256B": d.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B}[args.l2_promotion]
    oob = {"zero": d.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE}[args.oob_fill]
    u64, u32 = d.cuuint64_t, d.cuuint32_t
    tmap = drv.call("cuTensorMapEncodeTiled", dtype, u32(args.rank), args.global_address,
                    [u64(x) for x in args.global_dims], [u64(x) for x in args.global_strides],
                    [u32(x) for x in args.box_dims], [u32(x) for x in args.element_strides], interleave, swizzle,
                    l2, oob)
    return struct.pack("<16Q", *(int(x) for x in tmap.opaque))


@functools.lru_cache(maxsize=16384)  # (4x LAUNCH_CACHE_SIZE: a persistent launch has 11 maps, 3 of them its operands')
def _encoded(args: TensorMapArgs) -> bytes:
    return encode_tensor_map(args)


# --------------------------------------------------------------------------- launch plan
@dataclasses.dataclass(frozen=True)
class HopperPlan:
    """Everything a launch needs that can be decided without a GPU."""

    variant: str
    kernel: str
    grid: int  # blocks (a multiple of CLUSTER for the persistent rung)
    threads: int
    shared_mem: int
    cluster: int | None
    maps: tuple[TensorMapArgs, ...]  # a, b (and c for persistent); empty for wgmma
    build: PersistentBuild | None = None  # persistent only: the compile-time options
    sk_tiles: int = 0  # persistent only: cluster tiles dealt out as K slices (stream-K)
    # persistent only: a's and b's maps in boxes of EDGE_BOX_ROWS rows (the kernel's EdgeMaps;
    # b's rows are W's for b = w.T, else B's K-rows, which the kernel never cuts)
    edge_maps: tuple[tuple[TensorMapArgs, ...], ...] = ()

    @property
    def multicast(self) -> bool:
        return self.build is not None and self.build.multicast

    @property
    def clusters(self) -> int:
        return self.grid // (self.cluster or 1)

    @property
    def workspace_zeroed(self) -> int:
        """Bytes at the start of the stream-K workspace that must be zero before a launch
        (the ticket counter and the flags; the kernel leaves them zero); 0 without stream-K."""
        return WORKSPACE_ZEROED if self.sk_tiles else 0

    @property
    def workspace_bytes(self) -> int:
        """The stream-K workspace (gemm_hopper_persistent.cu, Workspace): header, flags,
        and 64 x tile_n fp32 partial sums per consumer warpgroup; 0 without stream-K."""
        if not self.sk_tiles:
            return 0
        assert self.build is not None
        return self.workspace_zeroed + self.clusters * self.cluster * self.build.consumers * self.build.partial_bytes


def tiles(m: int, n: int) -> int:
    return -(-m // BM) * -(-n // BN)


def cluster_tiles(m: int, n: int, build: PersistentBuild | None = None) -> int:
    b = build or PERSISTENT
    if b.swap_ab:  # (tiles of W's rows by the product's rows)
        m, n = n, m
    return -(-m // (b.cluster_m * b.tile_m)) * -(-n // (b.cluster_n * b.tile_n))


def stream_k(tiles: int, clusters: int, slices: int = 1, cluster: int = 1) -> tuple[int, int]:
    """(stream-K tiles, clusters to launch) of the persistent rung for ``tiles`` cluster
    tiles of ``slices`` K slices each, on a GPU that runs ``clusters`` clusters of
    ``cluster`` blocks at once; the
    stream-K tiles are the last ones, dealt out as runs of K slices instead of whole.
    Measured on an H100 (sessions 26 and 28, ``docs/notes/2026-11-27-session26.md`` and
    ``…-session28.md``):

    - less than one wave: each tile split into SPLIT equal runs, SPLIT the largest power
      of two with tiles x SPLIT clusters on the GPU, at most MAX_SPLIT and runs of
      MIN_SPLIT_SLICES at least (every run then starts where a run of the tile at once
      beside it does, and the finishing run adds SPLIT - 1 partial sums): 1.2-3.6x whole
      tiles at 128 x 4096 x 4096 ... 512 x 512 x 16384; fewer or shorter runs lost; and only
      tiles of MIN_SPLIT_TILE_SLICES slices or more (session 52; until then from 32, two runs of
      16). On an H200 (p340, CUDA-graph replay): tiles of 32 slices split in two ran 1.07-1.42x
      the time of whole tiles on every one-block build (128 x 128, 128 x 64, 64 x 128, 64 x 64;
      5 products of K 2048: 200 x 1008 x 2048 in 64 x 64 tiles 10.1 against 8.9 us; an eager
      call with stream-K's host time 36 against 10 us, p342); tiles of 64 slices or more ran
      faster split (129 x 1001 x 4096: 0.61-0.87x), 41-50 slices either way. Held out (p344: 40
      random products of 32-39 slices, all in 64 x 64 tiles, the only build default_build leaves
      below half a wave): whole tiles 1.148x faster in geometric mean (1.02-1.37x, none slower;
      the split's times with the workspace's memset), an eager call 1.92x (before stream-K kept a
      workspace per stream: KeptWorkspaces);
    - more than half a wave and at most two thirds (SK_BELOW_ONE_WAVE_AT_MOST), clusters of
      two blocks or more (measured on 2 x 1), where each cluster's run would be
      MIN_ALL_RUN_SLICES slices or more: every tile dealt out over every cluster (session 49;
      whole tiles until then, a third of the clusters idle or more). On an H200, 128 x 256 tiles in clusters of 2: found by the
      measured plans and p309 on 6 products of 36-44 tiles with runs of 53-84 slices (1.06-1.20x
      whole tiles; shorter runs lost, 835 x 2416 x 1136, runs of 11: 0.69x, and fuller waves
      lost at any length, 905 x 3448 x 10944, 56 tiles: 0.73x); then on 24 fresh products
      of 34-44 tiles with runs of 51-115 slices (p310): 1.08x in geometric mean, 0.96-1.25x,
      19 faster by more than 2 %, one slower by more than 2 % (1020 x 2344 x 11368: 0.96x);
      the same p310's 8 with runs under 50, 0.88x (0.69-1.09x);
    - two waves or more, where the last wave fills at most SK_LAST_WAVE_AT_MOST of the
      clusters: that wave and the one before it. Stream-K against whole tiles, by the last
      wave's share: 3072^3 (0.18) 1.13-1.23x, 5120^3 (0.06) 1.13x, 2048 x 11008 x 4096
      (0.21) 1.05x, 4224 x 8128 x 4160 (0.24) 1.05x; 1024 x 14336 x 4096 (0.39) 0.99x,
      2560 x 4096 x 4096 (0.42) 0.96x, 1024 x 11008 x 4096 (0.61) 0.88x, the decoder's
      5886 x 2048 x 2048 (0.79) 0.87x, 6144^3 (0.73) 0.9x (sessions 26 and 28, p189:
      interleaved rounds). A rule on the busy share of all waves (< 0.88, sessions 26-27)
      took 1024 x 11008 x 4096 and left 4224 x 8128 x 4160;
    - one wave and a second at most half full (SK_ONE_WAVE_SECOND_AT_MOST), clusters of two
      blocks or more (measured on 2 x 1): every tile dealt out, where each cluster's run is
      MIN_SPLIT_SLICES slices or more (session 43; until then whole tiles there; one-block clusters, never
      measured there, keep them). On an H200, 128 x 256 tiles in clusters of 2: on 9 products of
      68-84 cluster tiles where the measured plans (``gemm_tuning``; p281, p282) found it,
      1.04-1.6x whole tiles; on 28 held-out random products of 68-88 tiles (p286), 1.30x in
      geometric mean (846 x 4112 x 10832 1.69x), slower on the two whose runs were under 16
      slices (682 x 7264 x 760: 0.81x; 506 x 8672 x 712: 0.88x): the run length's floor was
      set after that, and it leaves 26 at 1.34x (372 x 11248 x 1000, runs of 21: 0.99x). Until
      session 49 the second wave had to be at most a third full; then the measured plans found
      every tile dealt out faster at 0.36-0.42 (p308: 678 x 7440 x 8328 1.17x, 879 x 5656 x 4608
      1.09x), and on 27 fresh products of 69-100 tiles (p309; the second wave 0.05-0.52 full)
      dealing out ran 1.01-1.54x whole tiles, 1.02-1.25x on the 7 between a third and half (639 x
      7592 x 8192 1.25x, 712 x 7464 x 1992 1.02x), 1.01 and 1.04x at 100 tiles; at 100 tiles an
      H100 in session 28 had measured 0.85x (2560 x 2560 x 10240), hence half and not more. Past one wave and a
      half, dealing out lost on the H200 too (691 x 10424 x 11072, 123 tiles: 0.84x, p308);
    - never past one wave for tiles of fewer than MIN_SPLIT_SLICES slices (session 50; until
      then the two regimes above dealt them out): on an H200, 8192 x 768 x 768 and 2048 x 3072 x
      768 (96 tiles of 12 slices, runs of 17.5) 0.73-0.75x whole tiles, 128 x 128 tiles at 6304 x 768
      x 768 and 2048 x 2304 x 768 0.78x (p322); with it, the 12 held-out products of K 256-960
      (p323) whose 128 x 256 tiles had been dealt out ran 1.03-1.40x as whole tiles (none slower);
    - otherwise none: (0, the tiles or the clusters, the fewer)."""
    whole = (0, max(1, min(tiles, clusters)))
    if tiles < 1 or clusters < 2 or 2 * clusters * slices * clusters >= 2**31:  # (the kernel counts in 32 bits)
        return whole
    waves, rest = divmod(tiles, clusters)
    if waves and slices < MIN_SPLIT_SLICES:  # (a tile this short pays more in partial sums than idle SMs cost)
        return whole
    if waves == 0:
        split = 1
        while (slices >= MIN_SPLIT_TILE_SLICES and split * 2 <= MAX_SPLIT and tiles * split * 2 <= clusters
               and slices // (split * 2) >= MIN_SPLIT_SLICES):
            split *= 2
        if split > 1:
            return tiles, tiles * split
        long_runs = tiles * slices >= MIN_ALL_RUN_SLICES * clusters
        if cluster >= 2 and tiles <= clusters * SK_BELOW_ONE_WAVE_AT_MOST and long_runs:
            return tiles, clusters
        return whole
    # (one wave and a bit: every tile dealt out, each cluster's run tiles x slices / clusters long)
    one_wave_pays = cluster >= 2 and tiles * slices >= MIN_SPLIT_SLICES * clusters
    if 0 < rest and ((waves >= 2 and rest <= clusters * SK_LAST_WAVE_AT_MOST)
                     or (waves == 1 and one_wave_pays and rest <= clusters * SK_ONE_WAVE_SECOND_AT_MOST)):
        return clusters + rest, clusters
    return whole


def as_laid_out(build: PersistentBuild, b_transposed: bool) -> PersistentBuild:
    """``build`` reading b as it lies (b's layout decides, not the build asked for): for the
    transposed product, b's (K, N) rows MN-major (a row-major b) or W's K-major (b = w.T);
    else B K-major for b = w.T. The build a launch compiles and runs."""
    if build.swap_ab:
        return build if build.a_mn_major != b_transposed else dataclasses.replace(build, a_mn_major=not b_transposed)
    return build if build.b_k_major == b_transposed else dataclasses.replace(build, b_k_major=b_transposed)


def persistent_build(multicast: bool = True, build: PersistentBuild | None = None) -> PersistentBuild:
    """``build`` (default :data:`PERSISTENT`), without multicast if ``multicast`` is False."""
    b = build or PERSISTENT
    return b if multicast else dataclasses.replace(b, multicast=False)


def check_shapes(m: int, n: int, k: int, b_transposed: bool = False) -> None:
    """``b_transposed``: B is ``w.T`` of a row-major (N, K) ``w``, whose rows are K long, so
    any N is taken (C's rows are then padded where N is not a multiple of 8: :func:`run`)."""
    if min(m, n, k) < 1:
        raise ValueError(f"M, N and K must be >= 1, got {m}, {n}, {k}")
    if k % 8:
        raise ValueError(f"K must be a multiple of 8 (TMA moves rows of A and B in whole 16-byte units), got K={k}: "
                         "pad both operands along K with zeros")
    if n % 8 and not b_transposed:
        raise ValueError(f"N must be a multiple of 8 for a row-major b (TMA moves its rows in whole 16-byte units), "
                         f"got N={n}: pass b as w.T of a row-major (N, K) weight w (read as it lies, any N: "
                         "nn.Linear's layout, e.g. GPT-2's 50257-word head), or pad b's columns with zeros and take "
                         "y[..., :N]")
    if max(m, n, k) >= 2**31:
        raise ValueError("M, N and K must be below 2^31")


def plan(variant: str, m: int, n: int, k: int, dtype: str, a_ptr: int = 0, b_ptr: int = 0, c_ptr: int = 0,
         *, max_clusters: int = 66, multicast: bool = True, build: PersistentBuild | None = None,
         sk_tiles: int | None = None, c_pitch: int | None = None) -> HopperPlan:
    """The launch of ``variant`` for an (M, K) @ (K, N) product: kernel name, grid, block,
    shared memory, cluster and tensor-map arguments. ``max_clusters``: clusters of the
    persistent kernel that fit on the GPU at once (its grid); ``build`` its options
    (default :data:`PERSISTENT`; ``multicast=False`` turns multicast off in it);
    ``sk_tiles``: its stream-K tiles (default :func:`stream_k`; 0: whole tiles only;
    another number: on every cluster); ``c_pitch``: the persistent rung's C rows, in
    elements, where they are padded past N (default N)."""
    if variant not in SOURCES:
        raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    if dtype not in DTYPES:
        raise ValueError(f"the Hopper GEMM takes bfloat16 or float16 inputs, got {dtype}")
    b = persistent_build(multicast, build) if variant == "persistent" else None
    check_shapes(m, n, k, b_transposed=b is not None and b.b_k_major and not b.a_mn_major)
    for name, p in (("a", a_ptr), ("b", b_ptr), ("out", c_ptr)):
        if p % 16:
            raise ValueError(f"{name} must be 16-byte aligned (a sliced view may not be): copy it")
    kernel = f"gemm_hopper_{variant}_{DTYPES[dtype]}"
    smem = shared_mem_bytes(variant)  # (the persistent rung's: its build's, below)
    maps: tuple[TensorMapArgs, ...] = ()
    if variant not in ("wgmma", "persistent"):
        maps = (tensor_map_args("a", a_ptr, m, k, dtype, BM, BK), tensor_map_args("b", b_ptr, k, n, dtype, BK, CHUNK_N))
    if b is not None:
        # The kernel's (M, N) and operands: a @ b, or for swap_ab W X^T, W = b's (N, K) rows as
        # its A and the activations a as its B (W = B^T form); C is (M, N) either way.
        km, kn = (n, m) if b.swap_ab else (m, n)
        (a_name, a_src), (b_name, b_src) = (("b", b_ptr), ("a", a_ptr)) if b.swap_ab else (("a", a_ptr), ("b", b_ptr))
        if b.b_k_major:  # (the kernel's B given as W = B^T: kn x K)
            b_rows, b_cols, b_box_rows, b_box_cols = kn, k, b.b_box_rows, BK
        else:
            b_rows, b_cols, b_box_rows, b_box_cols = k, kn, BK, CHUNK_N
        map_b = tensor_map_args(b_name, b_src, b_rows, b_cols, dtype, b_box_rows, b_box_cols)
        if b.a_mn_major:  # (a row-major K x N b, read in 64 x 64 chunks as a row-major B is; no edge boxes)
            map_a = tensor_map_args(a_name, a_src, k, km, dtype, BK, CHUNK_N)
            a_edges = (map_a,) * len(EDGE_BOX_ROWS)
        else:
            map_a = tensor_map_args(a_name, a_src, km, k, dtype, b.a_box_rows, BK)
            a_edges = tuple(tensor_map_args(a_name, a_src, km, k, dtype, rows, BK) for rows in EDGE_BOX_ROWS)
        maps = (map_a, map_b, tensor_map_args("out", c_ptr, m, n, dtype, OUT_ROWS, OUT_N, pitch_cols=c_pitch))
        edge_maps = (a_edges, tuple(tensor_map_args(b_name, b_src, b_rows, b_cols, dtype, rows, b_box_cols)
                                    for rows in EDGE_BOX_ROWS))
        n_tiles = cluster_tiles(m, n, b)  # (the product's shape: cluster_tiles swaps it for swap_ab)
        slices = -(-k // BK)
        if sk_tiles is None:
            sk_tiles, clusters = stream_k(n_tiles, max_clusters, slices, b.cluster)
        else:  # (an experiment's choice: every cluster)
            clusters = max(1, max_clusters if sk_tiles else min(n_tiles, max_clusters))
        if not 0 <= sk_tiles <= n_tiles or (sk_tiles and (n_tiles - sk_tiles) % clusters):
            raise ValueError(f"sk_tiles={sk_tiles}: the tiles left whole ({n_tiles} - sk_tiles) must be a whole number "
                             f"of waves of {clusters} clusters")
        if sk_tiles * slices * clusters >= 2**31:
            raise ValueError(f"sk_tiles={sk_tiles}: too many K slices to deal out ({sk_tiles} x {slices})")
        if sk_tiles and sk_tiles * slices < clusters:  # (a cluster without a run never raises the flags waited for)
            raise ValueError(f"sk_tiles={sk_tiles}: {sk_tiles} x {slices} K slices leave some of {clusters} clusters "
                             "without a run")
        if sk_tiles and clusters * b.cluster * b.consumers > WORKSPACE_FLAGS:
            raise ValueError(f"stream-K over {clusters * b.cluster} blocks: more warpgroups than the workspace's "
                             f"{WORKSPACE_FLAGS} flags")
        return HopperPlan(variant, kernel, b.cluster * clusters, b.threads, b.shared_mem, b.cluster, maps, b, sk_tiles,
                          edge_maps)
    return HopperPlan(variant, kernel, tiles(m, n), THREADS[variant], smem, None, maps)


# --------------------------------------------------------------------------- GPU side
def module(variant: str, arch: str, multicast: bool = True, *, build: PersistentBuild | None = None):
    """The compiled module of one rung (both dtypes); usable without a GPU. For the
    persistent rung, ``build`` (default :data:`PERSISTENT`); ``multicast=False``: the
    same build without multicast (the comparison point)."""
    defines = persistent_build(multicast, build).defines() if variant == "persistent" else {}
    return _module(variant, arch, tuple(sorted(defines.items())))


@functools.lru_cache(maxsize=None)
def _module(variant: str, arch: str, defines: tuple[tuple[str, int], ...]):
    return compiler.compile_package_kernel(SOURCES[variant], arch=arch, defines=dict(defines))


@functools.lru_cache(maxsize=None)
def max_active_clusters(device_index: int, arch: str, build: PersistentBuild | None = None) -> int:
    """How many clusters of the persistent kernel (``build``, default :data:`PERSISTENT`)
    the GPU runs at once (cuOccupancyMaxActiveClusters); SMs // cluster if the driver
    cannot say."""
    b = build or PERSISTENT
    return clusters_at_once(lambda: module("persistent", arch, build=b).kernel("gemm_hopper_persistent_bf16"),
                            b.threads, b.shared_mem, b.cluster, device_index)


def clusters_at_once(get_kernel: Callable[[], Any], threads: int, smem: int, cluster: int, device_index: int) -> int:
    """How many clusters of ``cluster`` blocks of the kernel ``get_kernel()`` returns
    (``threads`` a block, ``smem`` bytes of dynamic shared memory) the GPU runs at once
    (cuOccupancyMaxActiveClusters); SMs // cluster where the driver cannot say. A cluster's
    blocks share a GPC, so with large blocks fewer fit than SMs // cluster."""
    _, sms = arch_and_sm_count(device_index)
    try:
        kernel = get_kernel()
        set_max_dynamic_shared_memory(kernel, smem, device_index)
        cfg = _launch_config(sms // cluster * cluster, threads, smem, None, cluster)
        func = drv.call("cuKernelGetFunction", kernel.handle)  # the kernel in the current context
        n = int(drv.call("cuOccupancyMaxActiveClusters", func, cfg))
        return n if n > 0 else sms // cluster
    except Exception:  # an older driver: assume the SMs split evenly into clusters
        return sms // cluster


def _launch_config(grid: int, threads: int, smem: int, stream_handle: Any, cluster: int | None,
                   dependent: bool = False):
    """cuLaunchKernelEx's config; ``cluster``: blocks per cluster (None: no cluster
    attribute); ``dependent``: a programmatic dependent launch (the kernel waits for the
    one before it in ``fp_pdl::wait_for_prior_grid``, dependent_launch.cuh)."""
    from cuda.bindings import driver as d

    cfg = d.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid, 1, 1
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = threads, 1, 1
    cfg.sharedMemBytes = smem
    if stream_handle is not None:
        cfg.hStream = stream_handle
    attrs = []
    if cluster:
        attr = d.CUlaunchAttribute()
        attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster, 1, 1
        attrs.append(attr)
    if dependent:
        attr = d.CUlaunchAttribute()
        attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        attrs.append(attr)
    cfg.attrs = attrs
    cfg.numAttrs = len(attrs)
    return cfg


@dataclasses.dataclass
class _Launch:
    """One prepared launch: the kernel, its packed parameters (tensor maps encoded) and
    its launch config on one stream. Preparing costs ~130 us of Python and driver calls
    (tensor-map encoding, ctypes buffers, the config), far more than a small product's
    kernel: gemm_hopper keeps the launches of recent operands (:data:`_LAUNCHES`)."""

    kernel: Any
    cfg: Any
    params: Any  # ctypes array of pointers into ``bufs``
    bufs: list
    plan: HopperPlan
    stream_handle: int
    workspace_at: int = 0  # the address of the workspace pointer's parameter (stream-K), else 0
    lock: Any = dataclasses.field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        # (looked up once: a small product's whole call is ~20 us of Python, the launch 4 of it)
        self._launch_args = (self.cfg, self.kernel.handle, ctypes.addressof(self.params), 0)
        self._launch = drv.bound("cuLaunchKernelEx")
        # (stream-K's, looked up once; the skinny kernel's plans have no workspace)
        self.workspace_bytes = self.plan.workspace_bytes if self.workspace_at else 0
        self._workspace_set = 0  # (the workspace address in the parameters now)

    def enqueue(self, workspace: int = 0, zeroed: bool = False) -> None:
        """Launch; with stream-K, on ``workspace`` (workspace_bytes, on this stream), its
        counter and flags zeroed first on the stream unless ``zeroed`` (a workspace kept
        zero: the kernel leaves them as it found them)."""
        if not self.workspace_at:
            self._launch(*self._launch_args)
            return
        if not workspace:
            raise ValueError("this launch deals tiles out by K slices (stream-K): it needs a workspace")
        if not zeroed:
            drv.call("cuMemsetD32Async", workspace, 0, self.plan.workspace_zeroed // 4, self.stream_handle)
        with self.lock:  # (the parameter buffer is shared by threads launching the same operands)
            if workspace != self._workspace_set:
                ctypes.memmove(self.workspace_at, struct.pack("<Q", workspace), 8)
                self._workspace_set = workspace
            self._launch(*self._launch_args)


def _prepare(p: HopperPlan, a_ptr: int, b_ptr: int, c_ptr: int, m: int, n: int, k: int, stream_handle: int,
             device_index: int, arch: str, stamps_ptr: int | None = None) -> _Launch:
    from cuda.bindings import driver as d

    if stamps_ptr is not None:
        if p.variant != "ws":
            raise ValueError(f"role stamps are built into the ws rung only, not {p.variant!r}")
        kernel = _module("ws", arch, (("ROLE_STAMPS", 1),)).kernel(p.kernel)
    else:
        kernel = module(p.variant, arch, build=p.build).kernel(p.kernel)
    set_max_dynamic_shared_memory(kernel, p.shared_mem, device_index)
    if p.variant == "wgmma":
        raw = [struct.pack("<Q", a_ptr), struct.pack("<Q", b_ptr)]
    else:
        if p.variant == "persistent" and [len(m) for m in p.edge_maps] != [len(EDGE_BOX_ROWS)] * 2:
            raise ValueError("a persistent plan needs a's and b's edge maps (the kernel's two EdgeMaps): use plan()")
        raw = [_encoded(t) for t in p.maps] + [b"".join(_encoded(t) for t in maps) for maps in p.edge_maps]
    if p.variant != "persistent":
        raw.append(struct.pack("<Q", c_ptr))
    if p.build is not None and p.build.swap_ab:  # (the kernel's M and N: W's rows, then the product's)
        m, n = n, m
    raw += [struct.pack("<i", m), struct.pack("<i", n), struct.pack("<i", k)]
    if p.variant == "persistent":
        raw += [struct.pack("<i", p.sk_tiles), struct.pack("<Q", 0)]  # (the workspace: set at each launch)
    if stamps_ptr is not None:
        raw.append(struct.pack("<Q", stamps_ptr))
    params, bufs, ptrs = pack_params(raw)
    # A one-block cluster launches without the cluster attribute (its cluster instructions
    # then act on the implicit cluster of one block): launched as a cluster of 1, its two
    # cluster barriers cost ~0.5 us a launch (p247: 1024^2 x 64 4.12 -> 3.63 us).
    cluster = p.cluster if p.cluster and p.cluster > 1 else None
    dependent = p.variant == "persistent" and DEPENDENT_LAUNCH
    cfg = _launch_config(p.grid, p.threads, p.shared_mem, d.CUstream(stream_handle), cluster, dependent)
    return _Launch(kernel, cfg, params, bufs, p, stream_handle, ptrs[-1] if p.sk_tiles else 0)


def pack_params(raw: list[bytes]) -> tuple[Any, list, list[int]]:
    """cuLaunchKernelEx's parameter array for packed parameters ``raw``: each in its own
    64-byte aligned host buffer (the driver copies them at each launch; the buffers are
    kept with the launch for the next one). Returns (array, buffers, their addresses)."""
    bufs = [ctypes.create_string_buffer(r + b"\0" * 64, len(r) + 64) for r in raw]
    ptrs = [(ctypes.addressof(b) + 63) // 64 * 64 for b in bufs]
    for ptr, r in zip(ptrs, raw):
        ctypes.memmove(ptr, r, len(r))
    return (ctypes.c_void_p * len(ptrs))(*ptrs), bufs, ptrs


def launch_plan(p: HopperPlan, a_ptr: int, b_ptr: int, c_ptr: int, m: int, n: int, k: int, *, stream: Any,
                device_index: int = 0, arch: str | None = None, stamps_ptr: int | None = None) -> None:
    """Enqueue ``p`` on ``stream`` for checked pointers (the maps in ``p`` name them).
    ``stamps_ptr``: the ws rung's ROLE_STAMPS build, writing its stamps there
    (:mod:`.role_stamps`)."""
    if arch is None:
        arch, _ = arch_and_sm_count(device_index)
    ensure_current(device_index)  # the kernel runs in the current context: the stream's device's
    s = as_core_stream(stream)
    launch = _prepare(p, a_ptr, b_ptr, c_ptr, m, n, k, int(s.handle), device_index, arch, stamps_ptr)
    if not p.workspace_bytes:
        launch.enqueue()
        return
    ws = int(drv.call("cuMemAllocAsync", p.workspace_bytes, int(s.handle)))
    try:
        launch.enqueue(ws)
    finally:
        drv.call("cuMemFreeAsync", ws, int(s.handle))


# Recent launches of gemm_hopper, by everything that goes into them: the rung and build,
# dtype, shape, the three addresses, stream and device. PyTorch's and CuPy's allocators
# hand the same addresses back, so a loop over same-shaped products hits. Emptied when
# full: it must hold a model's whole cycle of products, or a loop over more of them than it
# holds misses at every call. 256 did not hold the two-level prefill's micro-batches of
# 4096 tokens (9 x 12 layers x 4 products: 432; session 44, p292: 151 ms of host time a
# prefill, the GPU idle 40 % of it, where 8192-token micro-batches (192) took 22). An entry is
# a few KiB of host memory.
_LAUNCHES: dict[tuple, _Launch] = {}
LAUNCH_CACHE_SIZE = 4096


def _stream_handle(stream: Any, ref: Operand) -> int:
    """The handle of the stream to enqueue on: ``stream``'s, or (None) the stream torch's
    or CuPy's arrays are worked on now; 0 (the legacy default stream) for fullpipe arrays."""
    if stream is None:
        current = current_stream_handle(ref)
        return 0 if current is None else current
    if hasattr(stream, "__cuda_stream__"):
        return int(stream.__cuda_stream__()[1])
    return int(as_core_stream(stream).handle)


def gemm_hopper(a: Any, b: Any, *, variant: str = "persistent", out: Any = None, stream: Any = None,
                _multicast: bool = True, _build: PersistentBuild | None = None, _sk_tiles: int | None = None) -> Any:
    """``out = a @ b`` for bf16/fp16 (M, K) and (K, N) device arrays (torch, CuPy or
    fullpipe), fp32 accumulation, result in the input dtype; enqueued on ``stream``
    (default: torch's/CuPy's current stream for their arrays), returns ``out``.
    ``variant``: a rung of the ladder (for a few rows, ``gemm(variant="hopper")`` picks the
    skinny kernel where it is faster). The persistent rung also takes ``b`` as ``w.T`` of a
    row-major (N, K) ``w`` (an nn.Linear weight) and reads ``w`` as it lies, for any N (C's
    rows padded where N is not a multiple of 8: :func:`_run_padded_rows`).
    Where the persistent rung deals tiles out by K slices (stream-K), each stream keeps a
    workspace for its later launches (up to ~17 MiB on 132 SMs, at most 8 streams; inside a CUDA graph
    capture the graph makes its own): :func:`release_workspaces` gives them back.
    For the experiments (persistent only): ``_multicast=False``, every block loads all
    of its operands; ``_build``, another :class:`PersistentBuild` than :func:`default_build`'s;
    ``_sk_tiles``, the stream-K tiles (default :func:`stream_k`, 0: none)."""

    if variant not in SOURCES:
        raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    return run(operand(a, "a"), operand(b, "b", transposed_ok=True), variant, out, stream, _multicast, _build,
               _sk_tiles)


def run(A: Operand, B: Operand, variant: str, out: Any, stream: Any, multicast: bool = True,
        build: PersistentBuild | None = None, sk_tiles: int | None = None) -> Any:
    """:func:`gemm_hopper` on parsed operands and a known rung (``gemm(variant=...)``
    comes here having parsed them once)."""
    m, n, k = matmul_shape(A, B)
    if A.dtype not in DTYPES:
        raise ValueError(f"gemm_hopper takes bfloat16 or float16 inputs, got {A.dtype}")
    check_shapes(m, n, k, b_transposed=B.transposed)
    if B.transposed and variant != "persistent":
        raise ValueError(f"b is a transposed view (b.T is contiguous): the {variant} rung reads a row-major b only; "
                         "the persistent rung (gemm(variant='hopper'), gemm_hopper(variant='persistent')) reads it "
                         "as it lies, or pass b.contiguous()")
    if variant == "persistent" and (n % 8 or _is_pitched(out)):  # (b is w.T, or out rows of padded ones)
        return _run_padded_rows(A, B, out, stream, multicast, build, sk_tiles)
    out, C, handle = prepare_output(A, B, out, stream)
    _enqueue(A, B, variant, C.ptr, n, handle, multicast, build, sk_tiles, on_current=stream is None)
    return out


def _is_pitched(out: Any) -> bool:
    """Is ``out`` a 2-D array of contiguous rows lying further apart than its columns (the
    (M, N) view :func:`_run_padded_rows` returns)?"""
    return out is not None and row_pitch(out) > 0


def _run_padded_rows(A: Operand, B: Operand, out: Any, stream: Any, multicast: bool, build: PersistentBuild | None,
                     sk_tiles: int | None) -> Any:
    """The persistent rung where C's rows are not C-contiguous whole 16-byte units: an N that
    is not a multiple of 8 (``w.T`` of an (N, K) weight, e.g. GPT-2's 50257-word head), or an
    ``out`` whose rows lie further apart than N. The TMA store needs row pitches of whole
    16-byte units, and clips at N: without ``out`` (torch, CuPy) C is written into rows padded
    to a multiple of 8 and the result is its (M, N) view (not contiguous; ``.contiguous()``
    copies; given back as ``out``, it is written in place); an ``out`` of such rows is written
    in place; into any other ``out`` (or for fullpipe arrays) through a scratch matrix of
    padded rows, then a 2-D copy on the stream (M x N x 2 bytes read and written)."""
    m, n, _ = matmul_shape(A, B)
    pitch = _round_up(n, 8)
    on_current = stream is None
    if out is None and A.kind in ("torch", "cupy"):
        handle = launch_stream(A, B, stream)
        padded, P = empty_like_kind(A, (m, pitch), A.dtype, handle)
        _enqueue(A, B, "persistent", P.ptr, pitch, handle, multicast, build, sk_tiles, on_current)
        return padded[:, :n]
    out, C, handle = prepare_output(A, B, out, stream, pitched_ok=True)
    if C.pitch and C.pitch % 8 == 0 and C.ptr % 16 == 0:  # (rows of whole 16-byte units: written in place)
        _enqueue(A, B, "persistent", C.ptr, C.pitch, handle, multicast, build, sk_tiles, on_current)
        return out
    via_scratch(A, C, m, n, pitch, handle, on_current,
                lambda at: _enqueue(A, B, "persistent", at, pitch, handle, multicast, build, sk_tiles, on_current))
    return out


def via_scratch(A: Operand, C: Operand, m: int, n: int, pitch: int, handle: int, on_current: bool,
                write: Callable[[int], None]) -> None:
    """C (M x N, rows ``C.pitch`` or N elements apart) written through a scratch matrix:
    ``write(address)`` enqueues what fills an M x ``pitch`` matrix there, then its first N
    columns are copied into C, on the stream ``handle``."""
    scratch, at = _workspace(A, m * pitch * ELEM, handle, on_current)
    write(at)
    copy_rows(C.ptr, (C.pitch or n) * ELEM, at, pitch * ELEM, n * ELEM, m, handle)
    del scratch  # (freed in the order of the stream it was made for: after the copy)


def copy_rows(dst: int, dst_pitch: int, src: int, src_pitch: int, row_bytes: int, rows: int, handle: int) -> None:
    """``rows`` rows of ``row_bytes`` from device memory at ``src`` (rows ``src_pitch``
    bytes apart) to ``dst`` (``dst_pitch`` apart), enqueued on the stream ``handle``."""
    from cuda.bindings import driver as d

    p = d.CUDA_MEMCPY2D()
    p.srcMemoryType = p.dstMemoryType = d.CUmemorytype.CU_MEMORYTYPE_DEVICE
    p.srcDevice, p.srcPitch, p.dstDevice, p.dstPitch = src, src_pitch, dst, dst_pitch
    p.WidthInBytes, p.Height = row_bytes, rows
    drv.call("cuMemcpy2DAsync", p, handle)


def _enqueue(A: Operand, B: Operand, variant: str, c_ptr: int, c_pitch: int, handle: int, multicast: bool,
             build: PersistentBuild | None, sk_tiles: int | None, on_current: bool) -> None:
    """Launch ``variant`` for ``A @ B`` into C at ``c_ptr`` (rows ``c_pitch`` elements
    apart) on the stream ``handle``: the launch of recent operands again (_LAUNCHES), else
    planned and prepared now; stream-K's workspace made for it (``on_current``: the stream
    is the framework's current one)."""
    m, n, k = matmul_shape(A, B)
    device_index = A.device_index
    key = (variant, build, multicast, sk_tiles, A.dtype, m, n, k, A.ptr, B.ptr, B.transposed, c_ptr, c_pitch, handle,
           device_index, DEPENDENT_LAUNCH)
    launch = _LAUNCHES.get(key)
    if launch is None:
        arch, sms = arch_and_sm_count(device_index)
        chosen = (persistent_build(multicast, build or default_build(m, n, k, sms, B.transposed))
                  if variant == "persistent" else None)
        if chosen and chosen.swap_ab and chosen.cluster_n > 1 and not B.transposed:  # (W's slice shared: w.T only)
            chosen = persistent_build(multicast, default_build(m, n, k, sms, False))
        if chosen:
            chosen = as_laid_out(chosen, B.transposed)
        clusters = max_active_clusters(device_index, arch, chosen) if chosen else 0
        p = plan(variant, m, n, k, A.dtype, A.ptr, B.ptr, c_ptr, max_clusters=clusters or 1, build=chosen,
                 sk_tiles=sk_tiles, c_pitch=c_pitch if c_pitch != n else None)
        launch = _prepare(p, A.ptr, B.ptr, c_ptr, m, n, k, handle, device_index, arch)
        if len(_LAUNCHES) >= LAUNCH_CACHE_SIZE:
            _LAUNCHES.clear()
        _LAUNCHES[key] = launch
    if not launch.workspace_at:
        launch.enqueue()
        return
    if not _KEPT_WORKSPACES.keeps(handle) or capturing(handle):
        # (made for this launch and zeroed first; in a capture, the graph's own memory and a memset node)
        ws, ws_ptr = _workspace(A, launch.workspace_bytes, handle, on_current=on_current)
        launch.enqueue(ws_ptr)
        del ws  # (freed in the order of the stream it was made for: after the kernel)
        return
    ws, ws_ptr = _KEPT_WORKSPACES.get(A, launch.workspace_bytes, handle, on_current)
    launch.enqueue(ws_ptr, zeroed=True)
    del ws  # (held through the launch: another thread may replace or evict it meanwhile)


class KeptWorkspaces:
    """Stream-K workspaces kept between launches, one per (device, stream), each grown to
    the largest launch it served: zeroed once when made, and left zero by every launch
    (gemm_hopper_persistent.cu), so a stream-K launch pays neither an allocation nor a
    memset (p343, an H200 host: 19.2 us a call against whole tiles' 9.5). Launches on one
    stream run one after another, so they may share its workspace; not so on the per-thread
    default stream (one stream per thread under one handle: :meth:`keeps` says no). At most
    ``limit`` streams keep one (the least recently used gives its up: freed in its stream's
    order, after the work enqueued there). Not for a stream being captured into a CUDA
    graph (the graph would keep using it after the capture)."""

    def __init__(self, limit: int = 8):
        self.limit = limit
        self._held: dict[tuple[int, int], tuple[Any, int, int]] = {}  # (device, stream) -> (array, address, bytes)
        self._lock = threading.Lock()

    @staticmethod
    def keeps(handle: int) -> bool:
        """Whether launches on the stream ``handle`` may share a kept workspace: all but
        the per-thread default stream's (handle 2, or 0 where cuda-bindings maps 0 to it)."""
        return handle != PER_THREAD_STREAM and not (handle == 0 and _per_thread_default_stream())

    def get(self, ref: Operand, nbytes: int, handle: int, on_current: bool = False) -> tuple[Any, int]:
        """A zeroed workspace of ``nbytes`` or more for launches on the stream ``handle``
        (made from the allocator of ``ref``'s kind, on that stream): (the array, to hold
        until the launch is enqueued, and its address)."""
        key = (ref.device_index, handle)
        with self._lock:
            held = self._held.pop(key, None)  # (put back last: the dict's order is the use order)
            if held is None or held[2] < nbytes:
                array, ptr = _workspace(ref, nbytes, handle, on_current)
                drv.call("cuMemsetD32Async", ptr, 0, WORKSPACE_ZEROED // 4, handle)
                held = (array, ptr, nbytes)  # (the one it replaces is freed in the stream's order)
            self._held[key] = held
            while len(self._held) > self.limit:
                del self._held[next(iter(self._held))]
            return held[0], held[1]

    def held_bytes(self) -> int:
        """Device memory the kept workspaces hold."""
        with self._lock:
            return sum(h[2] for h in self._held.values())

    def clear(self) -> None:
        """Give every kept workspace up (each freed in its stream's order)."""
        with self._lock:
            self._held.clear()


_KEPT_WORKSPACES = KeptWorkspaces()


def release_workspaces() -> int:
    """Give back the stream-K workspaces kept for later launches (each freed in its
    stream's order; the next stream-K launch on a stream makes its own again). Returns the
    bytes given back."""
    held = _KEPT_WORKSPACES.held_bytes()
    _KEPT_WORKSPACES.clear()
    return held


PER_THREAD_STREAM = 2  # CU_STREAM_PER_THREAD: the handle of every thread's own default stream


@functools.lru_cache(maxsize=None)
def _per_thread_default_stream() -> bool:
    """Whether cuda-bindings calls the driver's per-thread entry points (stream 0 is then
    each thread's own default stream)."""
    return os.environ.get("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM", "0") not in ("", "0")


_is_capturing = None


def capturing(handle: int) -> bool:
    """Whether the stream ``handle`` is being captured into a CUDA graph."""
    global _is_capturing
    if _is_capturing is None:
        _is_capturing = drv.bound("cuStreamIsCapturing")
    return int(_is_capturing(handle)) != 0  # (CU_STREAM_CAPTURE_STATUS_NONE)


def launch_stream(A: Operand, B: Operand, stream: Any) -> int:
    """The handle of the stream ``A @ B`` goes on (``stream``, or the framework's current
    one), its device made current; checks the operands' alignment."""
    if A.ptr % 16 or B.ptr % 16:
        raise ValueError("a and b must be 16-byte aligned (a sliced view may not be): copy them")
    ensure_current(A.device_index)  # the kernel runs in the current context: the stream's device's
    return _stream_handle(stream, A)


def prepare_output(A: Operand, B: Operand, out: Any, stream: Any,
                   pitched_ok: bool = False) -> tuple[Any, Operand, int]:
    """(out, its operand, the launch stream's handle) for ``A @ B`` on ``stream``: checks
    the operands' alignment, makes their device current, allocates ``out`` (of A's kind,
    on that stream) or checks the one given (``pitched_ok``: its rows may lie further
    apart than N, ``Operand.pitch``)."""
    m, n = A.shape[0], B.shape[1]
    handle = launch_stream(A, B, stream)
    if out is None:
        out, C = empty_like_kind(A, (m, n), A.dtype, handle)
    else:
        C = operand(out, "out", pitched_ok=pitched_ok)
        if C.shape != (m, n) or C.dtype != A.dtype:
            raise ValueError(f"out must be an {(m, n)} {A.dtype} array, got {C.shape} {C.dtype}")
        if C.device_index != A.device_index:
            raise ValueError("out must be on the same GPU as a and b")
    return out, C, handle


def _workspace(ref: Operand, nbytes: int, handle: int, on_current: bool = False) -> tuple[Any, int]:
    """Stream-K's workspace (the array, to keep until the launch is enqueued, and its
    address), from the allocator of ``ref``'s kind and in the order of the launch's stream
    ``handle`` (``on_current``: the framework's current stream, known to the caller):
    dropped, it is reused only by later work on that stream (inside a CUDA graph capture,
    by the capture's own memory)."""
    if ref.kind == "torch":
        import torch

        if on_current or handle == current_stream_handle(ref):
            ws = torch.empty(nbytes, dtype=torch.uint8, device=ref.obj.device)
        else:
            from ..cuda.interop import torch_stream

            with torch.cuda.stream(torch_stream(handle, device=ref.device_index)):
                ws = torch.empty(nbytes, dtype=torch.uint8, device=ref.obj.device)
        return ws, ws.data_ptr()
    if ref.kind == "cupy":
        from ..cuda.interop import cupy_stream

        with cupy_stream(handle, device=ref.device_index):
            ws, W = empty_like_kind(ref, (nbytes,), "uint8", handle)
        return ws, W.ptr
    ws, W = empty_like_kind(ref, (nbytes,), "uint8", handle)
    return ws, W.ptr


def flops(m: int, n: int, k: int) -> float:
    return 2.0 * m * n * k


def _selftest(argv: list[str] | None = None) -> int:
    """Small checked runs of every rung (for compute-sanitizer); exit 1 on a wrong result."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m fullpipe.kernels.hopper_gemm")
    ap.add_argument("--selftest", action="store_true", required=True)
    ap.add_argument("--variant", choices=VARIANTS, action="append")
    ap.add_argument("--dtype", choices=list(DTYPES), default="bfloat16")
    ap.add_argument("--build", choices=[b.label for b in SWEEP_BUILDS],
                    help="persistent rung: this build of SWEEP_BUILDS instead of PERSISTENT")
    ap.add_argument("--b-transposed", action="store_true",
                    help="b as w.T of a row-major (N, K) w (the persistent rung only)")
    args = ap.parse_args(argv)
    import torch

    build = {b.label: b for b in SWEEP_BUILDS}[args.build] if args.build else None

    # (stream-K: 512 x 256 x 4096, 32 tiles of 64 x 64, 4 runs each; 2304^2 x 1024, 81 cluster tiles over 66
    # clusters; 3072 x 3072 x 1024, two waves whole, then 78 tiles split: the launches after the first on
    # the stream's kept workspace, left zero by the one before)
    # (8 x 512 x 4096 and 72 x 1024 x 2560: stream-K with a warpgroup, and warps, on rows past the end)
    # (258 x 3392 x 520: 128 x 128 tiles whose last row loads an 8-row edge box, and a B chunk past N)
    shapes = [(256, 512, 128), (200, 264, 72), (130, 520, 1000), (1, 8, 8), (512, 256, 4096), (2304, 2304, 1024),
              (3072, 3072, 1024), (8, 512, 4096), (72, 1024, 2560), (258, 3392, 520)]
    if build:  # a grid on which the Hilbert walk skips cells (5 x 7 cluster tiles at 2 x 1)
        shapes.append((1200, 1704, 520))
    bad = 0
    for variant in args.variant or (["persistent"] if args.b_transposed else VARIANTS):
        for m, n, k in shapes:
            g = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
            dt = getattr(torch, args.dtype)
            a = torch.randn(m, k, device="cuda", generator=g).to(dt)
            if args.b_transposed:
                b = torch.randn(n, k, device="cuda", generator=g).to(dt).T
            else:
                b = torch.randn(k, n, device="cuda", generator=g).to(dt)
            out = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
            gemm_hopper(a, b, variant=variant, out=out, **({"_build": build} if variant == "persistent" else {}))
            torch.cuda.synchronize()
            ref = a.double() @ b.double()
            err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
            ok = err < 1e-2 and not torch.isnan(out).any()
            bad += not ok
            layout = " b=w.T" if args.b_transposed else ""
            print(f"{'ok  ' if ok else 'BAD '} {variant:10s} {args.dtype} {m}x{n}x{k}{layout}  rel err {err:.2e}",
                  flush=True)
    if "persistent" in (args.variant or VARIANTS) and not args.b_transposed:
        err = dependent_chain_error(384, 512, getattr(torch, args.dtype), build)
        ok = err < 1e-2
        bad += not ok
        print(f"{'ok  ' if ok else 'BAD '} persistent dependent chain x@w1@w2@w3 (384x512)  rel err {err:.2e}",
              flush=True)
    return 1 if bad else 0


def dependent_chain_error(rows: int, width: int, dtype: Any, build: PersistentBuild | None = None,
                          repeats: int = 1) -> float:
    """Three persistent launches back to back with nothing between them (dependent launches),
    ``repeats`` times over: the second reads what the first wrote, the third overwrites what
    the second reads. Their relative error against the same chain in float64, rounded to
    ``dtype`` where the chain rounds (inf if an output was never written). For the
    selftest and the GPU tests."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(rows + width)
    x = torch.randn(rows, width, device="cuda", generator=g).to(dtype)
    w = [(torch.randn(width, width, device="cuda", generator=g) / width ** 0.5).to(dtype) for _ in range(3)]
    h, y = (torch.full((rows, width), float("nan"), device="cuda", dtype=dtype) for _ in range(2))
    opts = {"_build": build} if build else {}
    for _ in range(repeats):
        gemm_hopper(x, w[0], out=h, **opts)
        gemm_hopper(h, w[1], out=y, **opts)   # reads h just written
        gemm_hopper(y, w[2], out=h, **opts)   # overwrites h, which the launch before reads
    torch.cuda.synchronize()
    if torch.isnan(h).any():
        return float("inf")
    ref = ((x.double() @ w[0].double()).to(dtype).double() @ w[1].double()).to(dtype).double() @ w[2].double()
    return float(torch.linalg.norm(h.double() - ref) / torch.linalg.norm(ref))


if __name__ == "__main__":
    import sys

    sys.exit(_selftest())
