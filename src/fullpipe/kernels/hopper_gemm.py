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
K slices of 64. Constraints (checked, ``ValueError`` naming them): M, N, K >= 1;
K and N multiples of 8 (a row of A or B must be a multiple of 16 bytes, which TMA
needs for its strides and the cp.async rung for whole 16-byte chunks); A, B and C
16-byte aligned. Any M, N, K otherwise: TMA zero-fills boxes that hang over an edge
and clips stores; the cp.async rung zero-fills chunks past the edges.

Build options of the persistent rung (cluster shape, tile order, epilogue stores) are a
:class:`PersistentBuild`; :data:`PERSISTENT` is the one ``gemm_hopper`` uses, and
``scripts/hopper-gemm-sweep`` measures the alternatives.

Tensor maps: :func:`tensor_map_args` computes cuTensorMapEncodeTiled's arguments as a
:class:`TensorMapArgs` (pure, no GPU), :func:`encode_tensor_map` calls the driver. The
maps travel as ``__grid_constant__`` kernel parameters (128 bytes each), so the kernels
are launched here with cuLaunchKernelEx and a raw parameter array.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import struct
from typing import Any

from ..cuda import compiler
from ..cuda import driver as drv
from ..cuda.device import ensure_current
from ..cuda.launch import set_max_dynamic_shared_memory
from ..cuda.streams import as_core_stream
from ._operands import Operand, arch_and_sm_count, empty_like_kind, matmul_shape, operand

SOURCES = {
    "wgmma": "kernels/gemm_hopper_wgmma.cu",
    "tma": "kernels/gemm_hopper_tma.cu",
    "ws": "kernels/gemm_hopper_ws.cu",
    "persistent": "kernels/gemm_hopper_persistent.cu",
}
VARIANTS = tuple(SOURCES)
DTYPES = {"bfloat16": "bf16", "float16": "f16"}

# Geometry (gemm_hopper_tile.cuh and the kernels): keep in step with the .cu sources.
BM, BN, BK = 128, 256, 64
CHUNK_N = 64  # B columns per TMA box / swizzle chunk (128 bytes)
OUT_N, OUT_ROWS = 64, 64  # TMA store box of the persistent epilogue
STAGES = 4
CLUSTER = 2  # blocks per cluster along M in the default build (PERSISTENT); the experiment counts L2 reads with it
ELEM = 2
SLICE_BYTES = (BM * BK + BK * BN) * ELEM  # 48 KiB
THREADS = {"wgmma": 256, "tma": 256, "ws": 384, "persistent": 384}
MAX_BLOCK_SHARED = 227 * 1024


@dataclasses.dataclass(frozen=True)
class PersistentBuild:
    """Compile-time options of the persistent rung (the -D macros of
    gemm_hopper_persistent.cu; its header says what each one does).

    ``cluster_m`` blocks along M share B, ``cluster_n`` blocks along N share A (both
    multicast when ``multicast``); ``tile_order`` "grouped" walks ``group_m`` cluster-tile
    rows at a time, "hilbert" follows a Hilbert curve; ``stmatrix`` writes the epilogue's
    shared-memory pieces with stmatrix.
    """

    group_m: int = 8
    cluster_m: int = 2
    cluster_n: int = 1
    multicast: bool = True
    tile_order: str = "grouped"
    stmatrix: bool = False

    def __post_init__(self) -> None:
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
    def a_box_rows(self) -> int:
        """Rows of A one block loads per slice: its share of the 128 when A is multicast."""
        return BM // self.cluster_n if self.multicast else BM

    def defines(self) -> dict[str, int]:
        return {"GROUP_M": self.group_m, "CLUSTER_M": self.cluster_m, "CLUSTER_N": self.cluster_n,
                "MULTICAST": int(self.multicast), "TILE_ORDER": int(self.tile_order == "hilbert"),
                "STMATRIX": int(self.stmatrix)}

    @property
    def label(self) -> str:
        parts = [f"{self.cluster_m}x{self.cluster_n}", "hilbert" if self.tile_order == "hilbert" else f"g{self.group_m}"]
        if not self.multicast:
            parts.append("nomc")
        if self.stmatrix:
            parts.append("stsm")
        return "-".join(parts)


# The build gemm_hopper(variant="persistent") runs. To adopt a sweep winner, change this line.
PERSISTENT = PersistentBuild(group_m=8, cluster_m=2, cluster_n=1, multicast=True, tile_order="grouped", stmatrix=False)

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
)


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to


def shared_mem_bytes(variant: str, stages: int = STAGES) -> int:
    """Dynamic shared memory of a rung: its SharedStorage (a 1024-aligned struct, so its
    size rounds up to 1 KiB) plus 1 KiB of slack for aligning the dynamic base to 1024."""
    ring = stages * SLICE_BYTES
    barriers = {"wgmma": 0, "tma": 1, "ws": 2, "persistent": 2}[variant] * stages * 8
    epilogue = 2 * 2 * OUT_ROWS * OUT_N * ELEM if variant == "persistent" else 0
    return _round_up(ring + epilogue + barriers, 1024) + 1024


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
                    *, swizzle: str = "128B") -> TensorMapArgs:
    """cuTensorMapEncodeTiled's arguments for the row-major (rows, cols) matrix ``name``
    at ``address``, read or written in boxes of (box_rows, box_cols); ValueError names
    the constraint a matrix breaks."""
    if dtype not in DTYPES:
        raise ValueError(f"{name}: the Hopper GEMM takes bfloat16 or float16, got {dtype}")
    if rows < 1 or cols < 1:
        raise ValueError(f"{name} is empty ({rows} x {cols})")
    if rows >= 2**32 or cols >= 2**32:
        raise ValueError(f"{name}: a tensor-map dimension must be below 2^32, got {rows} x {cols}")
    if address % 16:
        raise ValueError(f"{name} must be 16-byte aligned for TMA (address % 16 = {address % 16}); copy it")
    pitch = cols * ELEM
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


@functools.lru_cache(maxsize=256)
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

    @property
    def multicast(self) -> bool:
        return self.build is not None and self.build.multicast


def tiles(m: int, n: int) -> int:
    return -(-m // BM) * -(-n // BN)


def cluster_tiles(m: int, n: int, build: PersistentBuild | None = None) -> int:
    b = build or PERSISTENT
    return -(-m // (b.cluster_m * BM)) * -(-n // (b.cluster_n * BN))


def persistent_build(multicast: bool = True, build: PersistentBuild | None = None) -> PersistentBuild:
    """``build`` (default :data:`PERSISTENT`), without multicast if ``multicast`` is False."""
    b = build or PERSISTENT
    return b if multicast else dataclasses.replace(b, multicast=False)


def check_shapes(m: int, n: int, k: int) -> None:
    if min(m, n, k) < 1:
        raise ValueError(f"M, N and K must be >= 1, got {m}, {n}, {k}")
    if k % 8 or n % 8:
        raise ValueError(f"K and N must be multiples of 8 (rows of A and B in whole 16-byte units), got K={k}, N={n}")
    if max(m, n, k) >= 2**31:
        raise ValueError("M, N and K must be below 2^31")


def plan(variant: str, m: int, n: int, k: int, dtype: str, a_ptr: int = 0, b_ptr: int = 0, c_ptr: int = 0,
         *, max_clusters: int = 66, multicast: bool = True, build: PersistentBuild | None = None) -> HopperPlan:
    """The launch of ``variant`` for an (M, K) @ (K, N) product: kernel name, grid, block,
    shared memory, cluster and tensor-map arguments. ``max_clusters``: clusters of the
    persistent kernel that fit on the GPU at once (its grid); ``build`` its options
    (default :data:`PERSISTENT`; ``multicast=False`` turns multicast off in it)."""
    if variant not in SOURCES:
        raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    if dtype not in DTYPES:
        raise ValueError(f"the Hopper GEMM takes bfloat16 or float16 inputs, got {dtype}")
    check_shapes(m, n, k)
    for name, p in (("a", a_ptr), ("b", b_ptr), ("out", c_ptr)):
        if p % 16:
            raise ValueError(f"{name} must be 16-byte aligned (a sliced view may not be): copy it")
    kernel = f"gemm_hopper_{variant}_{DTYPES[dtype]}"
    smem = shared_mem_bytes(variant)
    maps: tuple[TensorMapArgs, ...] = ()
    if variant != "wgmma":
        maps = (tensor_map_args("a", a_ptr, m, k, dtype, BM, BK), tensor_map_args("b", b_ptr, k, n, dtype, BK, CHUNK_N))
    if variant == "persistent":
        b = persistent_build(multicast, build)
        maps = (tensor_map_args("a", a_ptr, m, k, dtype, b.a_box_rows, BK), maps[1],
                tensor_map_args("out", c_ptr, m, n, dtype, OUT_ROWS, OUT_N))
        grid = b.cluster * max(1, min(cluster_tiles(m, n, b), max_clusters))
        return HopperPlan(variant, kernel, grid, THREADS[variant], smem, b.cluster, maps, b)
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
    _, sms = arch_and_sm_count(device_index)
    try:
        kernel = module("persistent", arch, build=b).kernel("gemm_hopper_persistent_bf16")
        smem = shared_mem_bytes("persistent")
        set_max_dynamic_shared_memory(kernel, smem, device_index)
        cfg = _launch_config(sms // b.cluster * b.cluster, THREADS["persistent"], smem, None, b.cluster)
        func = drv.call("cuKernelGetFunction", kernel.handle)  # the kernel in the current context
        n = int(drv.call("cuOccupancyMaxActiveClusters", func, cfg))
        return n if n > 0 else sms // b.cluster
    except Exception:  # an older driver: assume the SMs split evenly into clusters
        return sms // b.cluster


def _launch_config(grid: int, threads: int, smem: int, stream_handle: Any, cluster: int | None):
    from cuda.bindings import driver as d

    cfg = d.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid, 1, 1
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = threads, 1, 1
    cfg.sharedMemBytes = smem
    if stream_handle is not None:
        cfg.hStream = stream_handle
    if cluster:
        attr = d.CUlaunchAttribute()
        attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster, 1, 1
        cfg.attrs = [attr]
        cfg.numAttrs = 1
    else:
        cfg.numAttrs = 0
    return cfg


def launch_plan(p: HopperPlan, a_ptr: int, b_ptr: int, c_ptr: int, m: int, n: int, k: int, *, stream: Any,
                device_index: int = 0, arch: str | None = None, stamps_ptr: int | None = None) -> None:
    """Enqueue ``p`` on ``stream`` for checked pointers (the maps in ``p`` name them).
    ``stamps_ptr``: the ws rung's ROLE_STAMPS build, writing its stamps there
    (:mod:`.role_stamps`)."""
    from cuda.bindings import driver as d

    if arch is None:
        arch, _ = arch_and_sm_count(device_index)
    if stamps_ptr is not None:
        if p.variant != "ws":
            raise ValueError(f"role stamps are built into the ws rung only, not {p.variant!r}")
        kernel = _module("ws", arch, (("ROLE_STAMPS", 1),)).kernel(p.kernel)
    else:
        kernel = module(p.variant, arch, build=p.build).kernel(p.kernel)
    ensure_current(device_index)  # the kernel runs in the current context: the stream's device's
    set_max_dynamic_shared_memory(kernel, p.shared_mem, device_index)
    if p.variant == "wgmma":
        raw = [struct.pack("<Q", a_ptr), struct.pack("<Q", b_ptr)]
    else:
        raw = [_encoded(t) for t in p.maps]
    if p.variant != "persistent":
        raw.append(struct.pack("<Q", c_ptr))
    raw += [struct.pack("<i", m), struct.pack("<i", n), struct.pack("<i", k)]
    if stamps_ptr is not None:
        raw.append(struct.pack("<Q", stamps_ptr))
    # Each parameter in its own 64-byte aligned host buffer; the driver copies them.
    bufs = [ctypes.create_string_buffer(r + b"\0" * 64, len(r) + 64) for r in raw]
    ptrs = [(ctypes.addressof(b) + 63) // 64 * 64 for b in bufs]
    for b, ptr, r in zip(bufs, ptrs, raw):
        ctypes.memmove(ptr, r, len(r))
    params = (ctypes.c_void_p * len(ptrs))(*ptrs)
    s = as_core_stream(stream)
    cfg = _launch_config(p.grid, p.threads, p.shared_mem, d.CUstream(int(s.handle)), p.cluster)
    drv.call("cuLaunchKernelEx", cfg, kernel.handle, ctypes.addressof(params), 0)
    del bufs  # the driver has copied the parameters by the time cuLaunchKernelEx returns


def _default_stream(ref: Operand) -> Any:
    """The stream torch/CuPy work on now (so the product is ordered with their work);
    the legacy default stream for fullpipe arrays."""
    from cuda.core import Stream

    from ..cuda.streams import legacy_default_stream

    if ref.kind == "torch":
        import torch

        h = int(torch.cuda.current_stream(ref.device_index).cuda_stream)
    elif ref.kind == "cupy":
        import cupy

        h = int(cupy.cuda.get_current_stream().ptr)
    else:
        h = 0
    return legacy_default_stream() if h == 0 else Stream.from_handle(h)


def gemm_hopper(a: Any, b: Any, *, variant: str = "persistent", out: Any = None, stream: Any = None,
                _multicast: bool = True, _build: PersistentBuild | None = None) -> Any:
    """``out = a @ b`` for bf16/fp16 (M, K) and (K, N) device arrays (torch, CuPy or
    fullpipe), fp32 accumulation, result in the input dtype; enqueued on ``stream``
    (default: torch's/CuPy's current stream for their arrays), returns ``out``.
    For the experiments (persistent only): ``_multicast=False``, every block loads all
    of its operands; ``_build``, another :class:`PersistentBuild` than :data:`PERSISTENT`."""

    if variant not in SOURCES:
        raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    A, B = operand(a, "a"), operand(b, "b")
    m, n, k = matmul_shape(A, B)
    if A.dtype not in DTYPES:
        raise ValueError(f"gemm_hopper takes bfloat16 or float16 inputs, got {A.dtype}")
    check_shapes(m, n, k)
    if A.ptr % 16 or B.ptr % 16:
        raise ValueError("a and b must be 16-byte aligned (a sliced view may not be): copy them")
    s = as_core_stream(stream) if stream is not None else _default_stream(A)
    if out is None:
        out, C = empty_like_kind(A, (m, n), A.dtype, s)
    else:
        C = operand(out, "out")
        if C.shape != (m, n) or C.dtype != A.dtype:
            raise ValueError(f"out must be an {(m, n)} {A.dtype} array, got {C.shape} {C.dtype}")
        if C.device_index != A.device_index:
            raise ValueError("out must be on the same GPU as a and b")
    arch, _ = arch_and_sm_count(A.device_index)
    build = persistent_build(_multicast, _build) if variant == "persistent" else None
    clusters = max_active_clusters(A.device_index, arch, build) if build else 0
    p = plan(variant, m, n, k, A.dtype, A.ptr, B.ptr, C.ptr, max_clusters=clusters or 1, build=build)
    launch_plan(p, A.ptr, B.ptr, C.ptr, m, n, k, stream=s, device_index=A.device_index, arch=arch)
    return out


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
    args = ap.parse_args(argv)
    import torch

    build = {b.label: b for b in SWEEP_BUILDS}[args.build] if args.build else None

    shapes = [(256, 512, 128), (200, 264, 72), (130, 520, 1000), (1, 8, 8)]
    if build:  # a grid on which the Hilbert walk skips cells (5 x 7 cluster tiles at 2 x 1)
        shapes.append((1200, 1704, 520))
    bad = 0
    for variant in args.variant or VARIANTS:
        for m, n, k in shapes:
            g = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
            dt = getattr(torch, args.dtype)
            a = torch.randn(m, k, device="cuda", generator=g).to(dt)
            b = torch.randn(k, n, device="cuda", generator=g).to(dt)
            out = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
            gemm_hopper(a, b, variant=variant, out=out, **({"_build": build} if variant == "persistent" else {}))
            torch.cuda.synchronize()
            ref = a.double() @ b.double()
            err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
            ok = err < 1e-2 and not torch.isnan(out).any()
            bad += not ok
            print(f"{'ok  ' if ok else 'BAD '} {variant:10s} {args.dtype} {m}x{n}x{k}  rel err {err:.2e}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    import sys

    sys.exit(_selftest())
