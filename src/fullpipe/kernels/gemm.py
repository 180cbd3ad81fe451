"""The GEMM front: ``C = A @ B`` with one of the level-2 pipelining techniques.

    c = fullpipe.kernels.gemm(a, b, variant="double_buffer", stages=3, stream=s)

Layouts: A is (M, K), B is (K, N), both C-contiguous (row-major); C is (M, N)
float32, row-major. Inputs are PyTorch CUDA tensors, CuPy arrays or fullpipe
DeviceArrays; the result has the kind of ``a`` (or is ``out``).

Variants (one .cu source each, beside this file):

==================  ==========  =================================================
variant             inputs      technique
==================  ==========  =================================================
tiled               float32     shared tiles, load -> __syncthreads -> compute
double_buffer       float32     a 2/3/4-slice cp.async ring (CCCL cuda::pipeline)
warp_specialized    float32     loader warp -> compute warps -> storer warp
wmma                fp16/bf16   tensor cores (wmma) fed by a 2-5-stage cp.async ring
==================  ==========  =================================================

Any M, N, K >= 1 for the float32 variants (16-byte copies when K and N are
multiples of 4 and the pointers 16-byte aligned, element copies otherwise).
``wmma`` needs K and N multiples of 8 and 16-byte aligned pointers.
The kernel is enqueued on ``stream`` and the call returns at once.

``wmma`` tiles are compile-time constants: a :class:`WmmaConfig` (block tile,
K-slice, warp tile, stages, blocks per SM) becomes ``-D`` macros for NVRTC, one
cached cubin per tile. ``config=`` picks one of :data:`WMMA_CONFIGS` by name or
takes a WmmaConfig; without it :data:`WMMA_DEFAULT` is used.

The launch contract of every kernel (threads per block, dynamic shared memory) is
declared here, in :func:`plan`, and nowhere else; the CPU tests check it against the
compiled kernels (``__launch_bounds__`` and the layout sizes the sources export).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import numpy as np

from ..cuda import compiler
from ..cuda.launch import launch
from ..cuda.streams import as_core_stream
from . import gemm_tuning, hopper_gemm, skinny_gemm
from ._operands import Operand, arch_and_sm_count, matmul_shape, operand, output

# ---- launch contracts of the fp32 ladder (fp32_tile.cuh and the gemm_*.cu beside this file)
FP32_TILE = 128  # block tile of the fp32 kernels (128 x 128)
FP32_THREADS = 256  # tiled, double_buffer, ceiling: every thread loads and computes


def fp32_stage_bytes(bk: int = 16) -> int:
    """One ring slice (fp32_tile::Slice) at K-slice depth ``bk`` (-DFP32_BK):
    As[bk][128 + 4] (A transposed) + Bs[bk][128] floats."""
    return (bk * (128 + 4) + bk * 128) * 4


FP32_STAGE_BYTES = fp32_stage_bytes(16)  # the default build: 16640
WS_EPILOGUE_BYTES = 128 * 132 * 4  # warp_specialized: the C tile handed to the storer warp
WS_THREADS = 320  # 1 loader warp + 8 compute warps + 1 storer warp
MAX_BLOCK_SHARED = 227 * 1024  # dynamic shared memory one block may have (sm_80 .. sm_90)
MAX_SM_SHARED = 228 * 1024  # shared memory of one SM (sm_90); each resident block also costs 1 KiB
MAX_SM_REGISTERS = 65536


@dataclasses.dataclass(frozen=True)
class WmmaConfig:
    """One compile-time tiling of gemm_wmma.cu.

    Block tile ``bm x bn``, K-slice ``bk``, warp tile ``wm x wn`` (so
    ``(bm/wm) * (bn/wn)`` warps), ``stages`` ring buffers, ``min_blocks`` for
    ``__launch_bounds__`` (2: registers capped so that two blocks share an SM),
    ``prefetch``: fragments of the next K-step loaded during the current MMAs
    (False builds the plain loop, kept for comparison).
    """

    bm: int = 128
    bn: int = 256
    bk: int = 32
    wm: int = 64
    wn: int = 64
    stages: int = 4
    min_blocks: int = 1
    prefetch: bool = True

    SKEW = 8  # elements of padding per shared row (keeps ldmatrix conflict-free)

    @property
    def name(self) -> str:
        n = f"{self.bm}x{self.bn}x{self.bk}_w{self.wm}x{self.wn}_s{self.stages}"
        if self.min_blocks != 1:
            n += f"_b{self.min_blocks}"
        return n + ("" if self.prefetch else "_noprefetch")

    @property
    def warps(self) -> int:
        return (self.bm // self.wm) * (self.bn // self.wn)

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def stage_bytes(self) -> int:
        """One ring buffer: As[bm][bk+8] + Bs[bk][bn+8], 16-bit elements."""
        return (self.bm * (self.bk + self.SKEW) + self.bk * (self.bn + self.SKEW)) * 2

    @property
    def shared_mem(self) -> int:
        return self.stages * self.stage_bytes

    def with_stages(self, stages: int) -> "WmmaConfig":
        return dataclasses.replace(self, stages=stages)

    @property
    def defines(self) -> tuple[tuple[str, int], ...]:
        """The -D macros of gemm_wmma.cu (the stage count picks the kernel, not a macro)."""
        return (("WMMA_BM", self.bm), ("WMMA_BN", self.bn), ("WMMA_BK", self.bk), ("WMMA_WM", self.wm),
                ("WMMA_WN", self.wn), ("WMMA_MIN_BLOCKS", self.min_blocks), ("WMMA_PREFETCH", int(self.prefetch)))

    def validate(self) -> "WmmaConfig":
        """Raise ValueError naming the broken constraint (the same ones the .cu asserts)."""
        for f in ("bm", "bn", "bk", "wm", "wn", "stages", "min_blocks"):
            v = getattr(self, f)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
                raise ValueError(f"WmmaConfig.{f} must be a positive int, got {v!r}")
        if self.wm % 16 or self.wn % 16:
            raise ValueError(f"warp tile {self.wm}x{self.wn}: wm and wn must be multiples of 16 (wmma fragments are 16x16)")
        if self.bm % self.wm or self.bn % self.wn:
            raise ValueError(f"block tile {self.bm}x{self.bn} must be a whole number of {self.wm}x{self.wn} warp tiles")
        if self.bk % 32:
            raise ValueError(f"bk = {self.bk} must be a multiple of 32 (an even number of 16-deep wmma K-steps)")
        if self.threads > 1024:
            raise ValueError(f"{self.warps} warps = {self.threads} threads: a block has at most 1024 threads")
        a_cols, b_cols = self.bk // 8, self.bn // 8  # 16-byte chunks per row of As / Bs
        if self.threads % a_cols or (self.bm * a_cols) % self.threads:
            raise ValueError(f"the A slice ({self.bm}x{self.bk}) does not split into 16-byte chunks evenly over "
                             f"{self.threads} threads")
        if self.threads % b_cols or (self.bk * b_cols) % self.threads:
            raise ValueError(f"the B slice ({self.bk}x{self.bn}) does not split into 16-byte chunks evenly over "
                             f"{self.threads} threads")
        if not 2 <= self.stages <= 5:
            raise ValueError(f"stages must be one of (2, 3, 4, 5) for variant 'wmma', got {self.stages!r}")
        if self.min_blocks not in (1, 2):
            raise ValueError(f"min_blocks must be 1 or 2, got {self.min_blocks!r}")
        if self.shared_mem > MAX_BLOCK_SHARED:
            raise ValueError(
                f"wmma config {self.name} needs {self.shared_mem} bytes of shared memory, more than the "
                f"{MAX_BLOCK_SHARED} a block can have: use fewer stages or a smaller tile")
        if self.min_blocks * (self.shared_mem + 1024) > MAX_SM_SHARED:
            raise ValueError(
                f"wmma config {self.name}: {self.min_blocks} blocks of {self.shared_mem} bytes of shared memory "
                f"do not fit one SM ({MAX_SM_SHARED} bytes): use fewer stages or min_blocks=1")
        if self.warps * 16 * (self.wn + 4) * 4 > 2 * self.stage_bytes:
            raise ValueError(f"wmma config {self.name}: the epilogue strips do not fit in the ring")
        return self


# Candidate tilings for Hopper (mma.sync-class tensor cores through wmma); their sweep on
# an H200 is in docs/notes/kernels-history.md. Three ways to keep the tensor pipes fed:
# - ILP: one 8-warp block per SM, 64x64 warp tiles (4x4 accumulator fragments, 128
#   fp32 accumulators per thread, ~240 registers), next K-step's fragments prefetched;
# - two blocks per SM ("_b2"): one block's barrier and wait are covered by the other's MMAs;
# - TLP: 16 warps per SM with 64x32 warp tiles (<= 128 registers, so no fragment prefetch).
WMMA_CANDIDATES: tuple[WmmaConfig, ...] = (
    WmmaConfig(128, 256, 32, 64, 64, stages=4),
    WmmaConfig(128, 256, 32, 64, 64, stages=3),
    WmmaConfig(128, 256, 64, 64, 64, stages=3),
    WmmaConfig(128, 256, 64, 64, 64, stages=4),
    WmmaConfig(256, 128, 32, 64, 64, stages=4),
    WmmaConfig(256, 128, 64, 64, 64, stages=3),
    WmmaConfig(128, 128, 32, 64, 64, stages=4, min_blocks=2),
    WmmaConfig(128, 128, 32, 64, 64, stages=5, min_blocks=2),
    WmmaConfig(128, 128, 64, 64, 64, stages=3, min_blocks=2),
    WmmaConfig(128, 256, 32, 64, 32, stages=4, prefetch=False),
    WmmaConfig(128, 256, 64, 64, 32, stages=3, prefetch=False),
    WmmaConfig(128, 128, 32, 64, 32, stages=4, min_blocks=2, prefetch=False),
    WmmaConfig(128, 256, 32, 64, 64, stages=4, prefetch=False),  # 8 warps of 64 x 64 without fragment prefetch
)
WMMA_CONFIGS: dict[str, WmmaConfig] = {c.name: c for c in WMMA_CANDIDATES}
# The default wmma tiling: the fastest candidate on an H200 (docs/notes/kernels-history.md).
# Set it to another name in WMMA_CONFIGS to change it: nothing else needs to change.
WMMA_DEFAULT = "128x256x64_w64x64_s3"


def wmma_config(config: "str | WmmaConfig | None" = None, stages: int | None = None) -> WmmaConfig:
    """The validated WmmaConfig for ``config`` (a name in WMMA_CONFIGS, a WmmaConfig or
    None for WMMA_DEFAULT), with ``stages`` overriding its stage count."""
    if config is None:
        config = WMMA_DEFAULT
    if isinstance(config, str):
        if config not in WMMA_CONFIGS:
            raise ValueError(f"unknown wmma config {config!r}; choose one of {', '.join(WMMA_CONFIGS)} "
                             "or pass a fullpipe.kernels.gemm.WmmaConfig")
        config = WMMA_CONFIGS[config]
    if not isinstance(config, WmmaConfig):
        raise TypeError(f"config must be a wmma config name or a WmmaConfig, got {type(config).__name__}")
    if stages is not None:
        if not isinstance(stages, (int, np.integer)) or stages not in (2, 3, 4, 5):
            raise ValueError(f"stages must be one of (2, 3, 4, 5) for variant 'wmma', got {stages!r}")
        config = config.with_stages(int(stages))
    return config.validate()


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    source: str  # package-relative .cu path
    dtypes: tuple[str, ...]
    stages: tuple[int, ...]  # allowed stage counts (() = not a pipeline)
    default_stages: int | None


VARIANTS: dict[str, Variant] = {
    "tiled": Variant("tiled", "kernels/gemm_tiled.cu", ("float32",), (), None),
    "double_buffer": Variant("double_buffer", "kernels/gemm_double_buffer.cu", ("float32",), (2, 3, 4), 3),
    "warp_specialized": Variant(
        "warp_specialized", "kernels/gemm_warp_specialized.cu", ("float32",), (2, 3, 4), 4
    ),
    # wmma: the stage count comes with the config (WMMA_DEFAULT); `stages=` overrides it.
    "wmma": Variant("wmma", "kernels/gemm_wmma.cu", ("float16", "bfloat16"), (2, 3, 4, 5), None),
}


@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    """Everything about one launch except the pointers: testable without a GPU."""

    source: str
    kernel: str
    grid: tuple[int, ...]
    block: int
    shared_mem: int
    defines: tuple[tuple[str, int], ...] = ()  # -D macros the source is compiled with


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def plan(
    variant: str,
    m: int,
    n: int,
    k: int,
    dtype: str,
    *,
    stages: int | None = None,
    aligned: bool = True,
    sm_count: int = 132,
    config: "str | WmmaConfig | None" = None,
) -> LaunchPlan:
    """Choose the kernel and launch shape, or raise ValueError naming the constraint.

    ``aligned``: all pointers are 16-byte aligned. ``sm_count`` sizes persistent grids.
    ``config``: the wmma tiling (name or WmmaConfig; None = WMMA_DEFAULT).
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    v = VARIANTS[variant]
    for name, dim in (("M", m), ("N", n), ("K", k)):
        if not isinstance(dim, (int, np.integer)) or dim < 1:
            raise ValueError(f"{name} must be >= 1 (got {dim}): empty matrices have nothing to multiply")
        if dim >= 2**31:
            raise ValueError(f"{name} = {dim} does not fit the kernels' 32-bit indices")
    if dtype not in v.dtypes:
        raise ValueError(
            f"variant {variant!r} takes {' or '.join(v.dtypes)} inputs, got {dtype}; "
            + ("use variant='wmma' for float16/bfloat16" if dtype in ("float16", "bfloat16") else
               "convert the inputs (e.g. a.float()) or pick another variant")
        )
    if config is not None and variant != "wmma":
        raise ValueError(f"config= chooses a wmma tiling; variant {variant!r} has none (leave config=None)")
    if stages is None:
        stages = v.default_stages
    elif not v.stages:
        raise ValueError(f"variant {variant!r} has no pipeline stages; leave stages=None")
    elif stages not in v.stages:
        raise ValueError(f"stages must be one of {v.stages} for variant {variant!r}, got {stages!r}")

    if variant == "wmma":
        if k % 8 or n % 8:
            raise ValueError(
                f"variant 'wmma' copies 16-byte chunks of 8 elements: K and N must be multiples of 8 "
                f"(got K={k}, N={n}); pad the matrices with zeros"
            )
        if not aligned:
            raise ValueError("variant 'wmma' needs 16-byte aligned A, B and out (a sliced view is not); copy it")
        cfg = wmma_config(config, stages)
        tag = "f16" if dtype == "float16" else "bf16"
        tiles = _ceil(m, cfg.bm) * _ceil(n, cfg.bn)
        return LaunchPlan(v.source, f"gemm_wmma_{tag}_s{cfg.stages}", (tiles,), cfg.threads, cfg.shared_mem,
                          cfg.defines)

    vec = aligned and k % 4 == 0 and n % 4 == 0
    suffix = "" if vec else "_scalar"
    grid2d = (_ceil(n, FP32_TILE), _ceil(m, FP32_TILE))
    if variant == "tiled":
        return LaunchPlan(v.source, f"gemm_tiled_f32{suffix}", grid2d, FP32_THREADS, 0)
    if variant == "double_buffer":
        return LaunchPlan(v.source, f"gemm_double_buffer_s{stages}{suffix}", grid2d, FP32_THREADS,
                          stages * FP32_STAGE_BYTES)
    # warp_specialized: persistent, one block per SM walking the tiles
    tiles = grid2d[0] * grid2d[1]
    return LaunchPlan(
        v.source,
        f"gemm_warp_specialized_s{stages}{suffix}",
        (min(tiles, sm_count),),
        WS_THREADS,
        stages * FP32_STAGE_BYTES + WS_EPILOGUE_BYTES,
    )


CEILING_SOURCE = "kernels/gemm_fp32_ceiling.cu"


def plan_fp32_ceiling(m: int, n: int, k: int, stages: int = 3) -> LaunchPlan:
    """double_buffer's launch with its copies taken out (``gemm_fp32_ceiling_s{S}``):
    the same slices, barriers and ring over zeros, so its time is the fp32 tile math's
    ceiling for any pipeline at two blocks per SM. It writes zeros to C: a timing
    kernel, not a GEMM."""
    if stages not in VARIANTS["double_buffer"].stages:
        raise ValueError(f"stages must be one of {VARIANTS['double_buffer'].stages}, got {stages!r}")
    if min(m, n, k) < 1:
        raise ValueError(f"M, N, K must be >= 1, got {m}, {n}, {k}")
    if n % 4:
        raise ValueError(f"the ceiling kernel stores C as float4: N must be a multiple of 4, got {n}")
    grid2d = (_ceil(n, FP32_TILE), _ceil(m, FP32_TILE))
    return LaunchPlan(CEILING_SOURCE, f"gemm_fp32_ceiling_s{stages}", grid2d, FP32_THREADS, stages * FP32_STAGE_BYTES)


@functools.lru_cache(maxsize=None)
def _module(source: str, arch: str, defines: tuple[tuple[str, int], ...] = ()):
    """One compiled module per (source, arch, macros); NVRTC's disk cache is keyed the same way."""
    return compiler.compile_package_kernel(source, arch=arch, defines=dict(defines))


def precompile_wmma(config: "str | WmmaConfig", arch: str) -> str | None:
    """Compile one wmma tiling (both dtypes, every stage count) into the disk cache,
    without touching a GPU; returns None, or the error text. Picklable, for process pools."""
    cfg = wmma_config(config)
    try:
        compiler.compile_package_kernel(VARIANTS["wmma"].source, arch=arch, defines=dict(cfg.defines))
        return None
    except Exception as exc:  # the caller reports it beside the config
        return f"{type(exc).__name__}: {str(exc)[:300]}"


def module_for(p: LaunchPlan, arch: str):
    """The compiled module of a plan (usable without a GPU: pass ``arch``)."""
    return _module(p.source, arch, p.defines)


def kernel_for(p: LaunchPlan, device_index: int = 0):
    arch, _ = arch_and_sm_count(device_index)
    return module_for(p, arch).kernel(p.kernel)


def _float32_cp_async_operands(a: Any, b: Any, out: Any, stream: Any, who: str, *, nonempty: bool = False):
    """Checked operands of a float32 kernel that copies 16-byte chunks with cp.async:
    returns (A, B, out, C, core stream, m, n, k). Everything is checked before the
    output is allocated, except its alignment."""
    if stream is None:
        raise TypeError("stream is required")
    A, B = operand(a, "a"), operand(b, "b")
    m, n, k = matmul_shape(A, B)
    if A.dtype != "float32":
        raise ValueError(f"{who} takes float32 inputs, got {A.dtype}")
    if nonempty and min(m, n, k) < 1:
        raise ValueError(f"M, N, K must be >= 1, got {m}, {n}, {k}")
    if k % 4 or n % 4:
        raise ValueError(f"K and N must be multiples of 4 (16-byte copies), got K={k}, N={n}")
    s = as_core_stream(stream)
    out, C = output(out, A, (m, n), s)
    if any(x.ptr % 16 for x in (A, B, C)):
        raise ValueError("a, b and out must be 16-byte aligned (a sliced view may not be): copy them")
    return A, B, out, C, s, m, n, k


# The Hopper ladder (kernels/hopper_gemm.py): gemm(variant=...) name -> rung.
HOPPER_VARIANTS = {"hopper_wgmma": "wgmma", "hopper_tma": "tma", "hopper_ws": "ws",
                   "hopper_persistent": "persistent", "hopper_skinny": "skinny", "hopper": "auto"}
# (the ladder's rungs are hopper_gemm.py's; "skinny" is skinny_gemm.py, "auto" the plan
# measured for the shape where there is one, gemm_tuning.py, else the faster of the skinny
# kernel and the persistent rung by rule: skinny_gemm.preferred)


def gemm(
    a: Any,
    b: Any,
    *,
    variant: str = "double_buffer",
    stages: int | None = None,
    stream: Any,
    out: Any = None,
    config: "str | WmmaConfig | None" = None,
) -> Any:
    """``out = a @ b``, enqueued on ``stream`` (required); returns ``out``. The fp32
    variants (tiled, double_buffer, warp_specialized) take float32, wmma takes fp16/bf16,
    and all four write float32; the Hopper variants (``hopper_wgmma``, ``hopper_tma``,
    ``hopper_ws``, ``hopper_persistent``, ``hopper_skinny`` for at most 128 rows, and
    ``hopper``: the plan measured for the shape by :func:`.gemm_tuning.tune_gemm` or under
    ``FULLPIPE_GEMM_TUNE=1``, else by rule the skinny kernel for few rows and K long
    enough to split, or the persistent rung) take bf16/fp16
    and write the same dtype (see :mod:`.hopper_gemm`).

    ``b`` of ``hopper``, ``hopper_persistent`` and ``hopper_skinny`` may also be a
    transposed view, ``w.T`` of an (N, K) weight as ``torch.nn.Linear`` holds it
    (``F.linear(x, w)`` is ``gemm(x, w.T, variant="hopper", ...)``): the kernels read ``w``
    as it lies, with no copy. As in ``F.linear``, ``a`` of the Hopper variants may have
    leading dimensions, (..., K) for (batch, sequence, K) activations (a C-contiguous torch
    tensor or CuPy array: its rows are one (M, K) matrix); the result is then (..., N), and
    ``out`` may be given either way. K must be a multiple of 8, and N too for a row-major
    ``b``; from ``w.T`` any N is taken (GPT-2's 50257-word head): where the persistent rung
    runs, its result without ``out`` is then a view of rows padded to a multiple of 8
    (``.contiguous()`` copies), and into ``out`` a copy follows (session 51: GPT-2's head at
    2048 rows 240 us as the view, 409 into out, where ``torch.matmul`` took 1678).

    ``stream``: a cuda.core Stream or any object with ``__cuda_stream__`` (the
    result is ready once the stream reaches this point). ``out``: an (M, N)
    C-contiguous device array of the output dtype; when None, one of the kind of ``a``
    is allocated. ``config``: wmma only, the tiling (a name in WMMA_CONFIGS or a
    WmmaConfig; default WMMA_DEFAULT); ``stages`` overrides its stage count.
    """
    if stream is None:
        raise TypeError("stream is required: pass the stream to enqueue the kernel on (fullpipe.cuda.create_stream)")
    if variant in HOPPER_VARIANTS:  # bf16/fp16 in, the same dtype out (hopper_gemm.py, skinny_gemm.py)
        return _gemm_hopper_family(a, b, variant, out, stream)
    if variant not in VARIANTS:
        known = ", ".join([*VARIANTS, *HOPPER_VARIANTS])
        raise ValueError(f"unknown variant {variant!r}; choose one of {known}")
    A, B = operand(a, "a"), operand(b, "b")
    m, n, k = matmul_shape(A, B)
    # Validate everything that does not need the output before allocating it.
    plan(variant, m, n, k, A.dtype, stages=stages, aligned=True, config=config)
    s = as_core_stream(stream)
    out, C = output(out, A, (m, n), s)
    aligned = all(x.ptr % 16 == 0 for x in (A, B, C))
    _, sm_count = arch_and_sm_count(A.device_index)
    p = plan(variant, m, n, k, A.dtype, stages=stages, aligned=aligned, sm_count=sm_count, config=config)
    launch_plan(p, A.ptr, B.ptr, C.ptr, m, n, k, stream=s, device_index=A.device_index)
    return out


def _gemm_hopper_family(a: Any, b: Any, variant: str, out: Any, stream: Any) -> Any:
    """A rung of the Hopper ladder, the skinny kernel, or ("hopper") the plan measured for
    the shape (gemm_tuning; measured now under FULLPIPE_GEMM_TUNE), else by rule whichever
    of the skinny kernel and the persistent rung is faster for the shape."""
    A, B = operand(a, "a"), operand(b, "b", transposed_ok=True)  # (once: a decode step makes many such calls)
    if A.dtype not in hopper_gemm.DTYPES:
        raise ValueError(f"variant={variant!r} takes bfloat16 or float16 inputs, got {A.dtype} (float32: "
                         f"{', '.join(repr(v) for v, var in VARIANTS.items() if 'float32' in var.dtypes)})")
    if len(A.shape) > 2 and A.kind in ("torch", "cupy"):  # (..., K) rows, as F.linear takes them
        rows = A.shape[:-1]
        # (math.prod and the constructor: np.prod and dataclasses.replace took 7 of a call's 47 us, p412)
        A = Operand(A.obj, A.ptr, (math.prod(rows), A.shape[-1]), A.dtype, A.device_index, A.kind)
        if A.shape[0] == 0:  # (no rows: an empty result, as F.linear's; nothing to launch)
            _, n, _ = matmul_shape(A, B)
            if out is not None:
                return out
            return a.new_empty((*rows, n)) if A.kind == "torch" else _cupy_empty(a, (*rows, n))
        result = _hopper_on_operands(A, B, variant, None if out is None else _as_rows(out, rows), stream)
        return out if out is not None else result.reshape(*rows, result.shape[-1])
    return _hopper_on_operands(A, B, variant, out, stream)


def _hopper_on_operands(A: Any, B: Any, variant: str, out: Any, stream: Any) -> Any:
    kind = HOPPER_VARIANTS[variant]
    if kind == "auto":  # a plan measured for this shape (gemm_tuning), else the rule's
        m, n, k = matmul_shape(A, B)
        tuned = gemm_tuning.lookup(A, B, m, n, k)
        if tuned is None and gemm_tuning.tune_on_first_call():
            tuned = gemm_tuning.first_call(A, B, stream)
        if tuned is not None:
            return gemm_tuning.run_plan(tuned, A, B, out, stream)
        kind = "skinny" if skinny_gemm.preferred(m, n, k, arch_and_sm_count(A.device_index)[1]) else "persistent"
    if kind == "skinny":
        return skinny_gemm.run(A, B, out, stream)
    return hopper_gemm.run(A, B, kind, out, stream)


def _as_rows(out: Any, rows: tuple[int, ...]) -> Any:
    """``out`` for ``a`` of leading dimensions ``rows``: an (M, N) matrix as given, or an
    (*rows, N) one as the (M, N) matrix the kernels write (a view of the same memory)."""
    shape = tuple(getattr(out, "shape", ()))
    if len(shape) <= 2:
        return out  # (checked as any other)
    if shape[:-1] != tuple(rows) or not hasattr(out, "reshape"):
        raise ValueError(f"out must be an ({', '.join(map(str, rows))}, N) array or the ({math.prod(rows)}, N) "
                         f"matrix of its rows, got {shape}")
    contiguous = out.is_contiguous() if hasattr(out, "is_contiguous") else getattr(getattr(out, "flags", None),
                                                                                   "c_contiguous", False)
    if contiguous:
        return out.reshape(math.prod(rows), shape[-1])
    # a torch view of padded rows (a result for N not a multiple of 8 is one): view() never
    # copies, and says where the rows are not one matrix
    if hasattr(out, "is_contiguous") and hasattr(out, "view"):
        try:
            flat = out.view(math.prod(rows), shape[-1])
            if flat.stride(1) == 1 and flat.stride(0) >= shape[-1]:
                return flat
        except RuntimeError:
            pass
    raise ValueError(f"out of shape {shape} must be C-contiguous: its rows are written as one matrix")


def _cupy_empty(like: Any, shape: tuple[int, ...]) -> Any:
    import cupy

    with cupy.cuda.Device(like.device.id):
        return cupy.empty(shape, dtype=like.dtype)


def launch_plan(p: LaunchPlan, a_ptr: int, b_ptr: int, c_ptr: int, m: int, n: int, k: int, *, stream: Any,
                device_index: int = 0, shared_mem: int | None = None) -> None:
    """Enqueue the kernel of ``p`` on ``stream`` for already checked pointers.

    ``shared_mem`` (bytes, >= the plan's) launches with more dynamic shared memory
    than the kernel uses. The benchmark uses it to force one block per SM for two
    kernels alike (occupancy is then equal by construction); nothing else should.
    """
    smem = p.shared_mem
    if shared_mem is not None:
        if shared_mem < p.shared_mem:
            raise ValueError(f"shared_mem={shared_mem} is less than the {p.shared_mem} bytes {p.kernel} needs")
        smem = int(shared_mem)
    launch(
        as_core_stream(stream),
        kernel_for(p, device_index),
        p.grid,
        p.block,
        np.uint64(a_ptr),
        np.uint64(b_ptr),
        np.uint64(c_ptr),
        np.int32(m),
        np.int32(n),
        np.int32(k),
        shared_mem=smem,
        device_index=device_index,
    )


def flops(m: int, n: int, k: int) -> float:
    return 2.0 * m * n * k


def _selftest(argv: list[str] | None = None) -> int:
    """Every gemm() variant once on small inputs (or one square ``--size``), checked
    against float64, outputs poisoned first: the driver that scripts/sanitize-kernels
    runs under compute-sanitizer and scripts/ncu-kernels under ncu. Exit 1 on a wrong
    result."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m fullpipe.kernels.gemm")
    ap.add_argument("--selftest", action="store_true", required=True)
    ap.add_argument("--size", type=int, default=0, help="one square size instead of the small odd shapes")
    ap.add_argument("--only", default="", help="run only cases whose label contains this text")
    args = ap.parse_args(argv)
    import torch

    from ..cuda.device import Device
    from ..cuda.streams import create_stream

    stream = create_stream(Device(0))
    fp32_shapes = [(args.size,) * 3] if args.size else [(130, 68, 40), (67, 45, 33)]  # vector path, element path
    f16_shapes = [(args.size,) * 3] if args.size else [(136, 264, 48)]
    cases = []  # (label, shape, torch dtype, variant, gemm() keywords)
    for shape in fp32_shapes:
        cases.append(("tiled", shape, torch.float32, {"variant": "tiled"}))
        for s in VARIANTS["double_buffer"].stages:
            cases.append((f"double_buffer s{s}", shape, torch.float32, {"variant": "double_buffer", "stages": s}))
            cases.append((f"warp_specialized s{s}", shape, torch.float32, {"variant": "warp_specialized", "stages": s}))
    # Small sizes (sanitizers): every candidate tiling. One big size (ncu): the default
    # only, since ncu tells kernels apart by symbol and every tiling has the same ones.
    wmma_cfgs = [wmma_config(None)] if args.size else list(WMMA_CANDIDATES)
    for shape in f16_shapes:
        for dt in (torch.float16, torch.bfloat16):
            for cfg in wmma_cfgs:
                cases.append((f"wmma {str(dt)[6:]} {cfg.name}", shape, dt, {"variant": "wmma", "config": cfg}))
    bad = 0
    for label, (m, n, k), dt, kw in cases:
        if args.only and args.only not in label:
            continue
        a = torch.randn(m, k, device="cuda").to(dt)
        b = torch.randn(k, n, device="cuda").to(dt)
        out = torch.full((m, n), float("nan"), device="cuda")
        torch.cuda.synchronize()
        gemm(a, b, stream=stream, out=out, **kw)
        stream.sync()
        ref = a.double() @ b.double()
        err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
        ok = err < (1e-4 if dt == torch.float32 else 1e-2) and not bool(torch.isnan(out).any())
        bad += not ok
        print(f"{'ok  ' if ok else 'BAD '} {label:40s} {m}x{n}x{k}  rel err {err:.2e}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    import sys

    sys.exit(_selftest())
