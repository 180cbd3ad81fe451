"""The skinny Hopper GEMM: ``C = A @ B`` for at most 128 rows of A on sm_90a.

    c = gemm_skinny(a, b, stream=s)     # a: (M <= 128, K), b: (K, N), bf16 or fp16

A decode step multiplies a few requests' activations (M = requests) by each weight
matrix: the product reads all of B for 2 M flops per element, so it runs at the speed B
streams from memory. ``gemm_hopper_skinny.cu`` computes it transposed (B's columns are
wgmma's M, the few rows its N), in 64- or 128-column tiles, each tile's K cut into runs over
enough blocks to keep every SM streaming; a tile's runs are one cluster, whose first
block adds the others' fp32 sums over distributed shared memory (see the top of the .cu
file).

Constraints as :func:`.hopper_gemm.gemm_hopper`'s (K and N multiples of 8, 16-byte
aligned operands), and M <= :data:`MAX_ROWS`. Builds: ``ROWS`` = M rounded up to 8, 16,
32, 64 or 128.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
from typing import Any, Callable

from ..cuda import compiler
from ..cuda.launch import set_max_dynamic_shared_memory
from . import hopper_gemm as hg
from ._operands import Operand, arch_and_sm_count, matmul_shape, operand

SOURCE = "kernels/gemm_hopper_skinny.cu"
MAX_ROWS = 128
ROW_BUILDS = (8, 16, 32, 64, 128)
TILE_N, BK, CHUNK_N = 128, 64, 64  # (TILE_N: the default build's columns per block; 64 builds too)
STAGES = 4
THREADS = 160  # one consumer warpgroup and one producer warp
CONSUMER_THREADS = 128
# A run of K slices pays its ring's fill once; shorter ones are not worth a block.
MIN_RUN_SLICES = 4
# A tile's runs are one cluster: at most 8 blocks (the portable cluster size).
MAX_RUNS = 8
# The other runs' fp32 sums that a cluster's first block reads over DSMEM, (runs - 1) x
# 128 x rows x 4 bytes, at most this much: at 64 rows 3 runs beat 4 (64 x 4096 x 4096:
# 17.7 against 20.5 us), at 8 rows 8 runs were the fastest (8 x 1024 x 4096: 7.7 us
# against 8.6 in 4; p178, session 27, H100).
MAX_CLUSTER_SUM_BYTES = 64 * 1024


# Where ``gemm(variant="hopper")`` takes this kernel instead of the persistent rung: at most
# this many rows, and up to MAX_ROWS where N has few 128-column tiles (preferred()). On an
# H100 (session 27, p178; B from HBM, x cuBLAS) it read 0.64-1.07x at 1 to 64 rows where
# the persistent rung read 0.43-1.03x.
PREFERRED_ROWS = 64
# ... and K long enough for its split to pay: more than this at most PREFERRED_ROWS rows,
# and more than SHORT_K_MANY_ROWS above. Below, the persistent rung's 64-row tiles (session
# 39) won: on an H200 (p270, skinny's time / the persistent rung's, N 512-8192): 96-128 rows
# 1.02-1.56x at K = 512, 0.97-1.39x at 1024, 0.92-1.16x at 1536, 0.71-0.99x from 2048 on;
# 64 rows 1.06-1.26x at 512, 1.01-1.08x at 1024, 0.85-0.98x at 1536; 32 rows 0.80-1.17x at
# 512, 0.69-1.03x at 1024. On 40 random shapes drawn after (M 33-128, K 256-6144) the
# cut-off changed 5 choices: 1.004x in geometric mean (1.23x at best, 0.89x at worst).
SHORT_K = 512
SHORT_K_MANY_ROWS = 1536


def preferred(m: int, n: int, k: int, sms: int) -> bool:
    """Whether this kernel beats the persistent rung on an (m, k) @ (k, n) product on a
    GPU of ``sms`` SMs: at most PREFERRED_ROWS rows, and up to MAX_ROWS where n has too few
    128-column tiles to give half the SMs one (the persistent rung would split K there too:
    96-128 rows x 4096 x 4096, skinny 0.67-0.71x cuBLAS against 0.58-0.59x; with 11008 or
    32000 columns the persistent rung won, 0.93-1.03x against 0.87-0.96x; p178); and in both
    cases K longer than SHORT_K (SHORT_K_MANY_ROWS above PREFERRED_ROWS rows): shorter, the
    K split has little to split and the persistent rung's 64-row tiles win (p270)."""
    if k <= (SHORT_K if m <= PREFERRED_ROWS else SHORT_K_MANY_ROWS):
        return False
    if m <= PREFERRED_ROWS:
        return True
    return m <= MAX_ROWS and 2 * -(-n // TILE_N) <= sms


def columns_build(n: int, sms: int) -> tuple[int, int]:
    """(tile_n, stages) for n columns on a GPU of ``sms`` SMs: 64 columns a block and an
    8-slice ring where 64-column tiles still fit one wave (twice the blocks of 128-column
    tiles, each streaming its own part of B), else 128 and 4. On an H100 (p181, session 27,
    weights from HBM, x cuBLAS, 1-32 rows): 2048 x 2048 0.79-0.87 against 0.65-0.78,
    2048 x 6144 1.10-1.12 against 0.89-0.92, 4096 x 4096 0.91-0.94 against 0.81-0.90;
    with 11264 or 32000 columns (176 or 500 such tiles) 128 won (0.95-1.04 against
    0.95-1.00). At 64 rows this build holds one block an SM (129 KiB of ring): where a
    GPU's clusters of that many blocks cannot all run at once, :func:`split_k` takes fewer
    runs (64 x 2048 x 2048 and 64 x 5632 x 2048: 0.49 and 0.58x cuBLAS in 4 runs, 0.81 and
    0.89x in 3; p183, session 28, H100)."""
    return (64, 8) if -(-n // 64) <= sms else (TILE_N, STAGES)


def rows_build(m: int) -> int:
    """The ROWS build for ``m`` rows: the smallest of ROW_BUILDS that holds them."""
    if not 1 <= m <= MAX_ROWS:
        raise ValueError(f"the skinny GEMM takes 1 to {MAX_ROWS} rows, got M={m}")
    return next(r for r in ROW_BUILDS if r >= m)


def shared_mem_bytes(rows: int, tile_n: int = TILE_N, stages: int = STAGES) -> int:
    """The ring (``stages`` slices of B[64 x tile_n] and A[rows x 64]) and its barriers,
    rounded to 1 KiB, plus 1 KiB for aligning the base to 1024."""
    ring = stages * (tile_n * BK * 2 + rows * BK * 2)
    return hg._round_up(ring + 2 * stages * 8, 1024) + 1024


def split_k(tiles: int, slices: int, rows: int, sms: int, tile_n: int = TILE_N,
            co_resident: Callable[[int], int] | None = None) -> int:
    """K slices per run for ``tiles`` column tiles of ``slices`` slices each (the ROWS
    build ``rows``) on a GPU of ``sms`` SMs: as many runs as give every SM one block, at
    most MAX_RUNS, each of MIN_RUN_SLICES slices or more, and few enough that the first
    block of a cluster reads at most MAX_CLUSTER_SUM_BYTES of the others' sums. Measured
    on an H100 (p178, session 27): 8 x 4096 x 4096 took 15.2-15.9 us in 3 or 4 runs (96 or
    128 blocks), 16.6-17.0 in 8, 19.9-20.3 in one.

    ``co_resident(runs)``: how many clusters of ``runs`` blocks the GPU runs at once
    (cuOccupancyMaxActiveClusters). A cluster's blocks share a GPC, so with one block an SM
    fewer clusters fit than SMs // runs; a tile's cluster that does not fit waits for a
    second wave, twice the time. Fewer runs then, until every tile's cluster fits."""
    by_sms = sms // max(1, tiles)
    by_sums = 1 + MAX_CLUSTER_SUM_BYTES // (tile_n * rows * 4)
    runs = max(1, min(by_sms, MAX_RUNS, slices // MIN_RUN_SLICES, by_sums))
    if co_resident is not None:
        while runs > 1 and co_resident(runs) < tiles:
            runs -= 1
    return -(-slices // runs)


@dataclasses.dataclass(frozen=True)
class SkinnyPlan:
    """Everything a launch of the skinny kernel needs that is known without a GPU."""

    kernel: str
    rows: int  # the ROWS build
    tile_n: int  # columns of C per block (the TILE_N build)
    stages: int  # slices in the ring (the STAGES build)
    tiles: int  # tile_n-column tiles of C
    runs: int  # runs of K slices per tile
    slices_per_run: int
    shared_mem: int
    maps: tuple[hg.TensorMapArgs, ...]  # A (boxes of rows x 64), B (64 x 64)
    b_transposed: bool = False  # B given as w.T: map B over w (the B_K_MAJOR build)
    # A in boxes of hopper_gemm.EDGE_BOX_ROWS rows (the kernel loads M rounded up to 8 rows
    # with them where a ROWS box would hang more than 16 rows past M)
    a_edges: tuple[hg.TensorMapArgs, ...] = ()

    @property
    def grid(self) -> int:
        return self.tiles * self.runs

    @property
    def cluster(self) -> int | None:
        """A tile's runs, one cluster (None: one run, no cluster)."""
        return self.runs if self.runs > 1 else None


def plan(m: int, n: int, k: int, dtype: str, a_ptr: int = 0, b_ptr: int = 0, *, sms: int = 132,
         slices_per_run: int | None = None, tile_n: int | None = None, stages: int | None = None,
         co_resident: Callable[[int, int, int, int], int] | None = None, b_transposed: bool = False) -> SkinnyPlan:
    """The launch for an (m, k) @ (k, n) product on a GPU of ``sms`` SMs;
    ``slices_per_run``: the split of K (default :func:`split_k`); ``tile_n``, ``stages``:
    the build (default :func:`columns_build`); ``co_resident(rows, tile_n, stages, runs)``:
    the clusters of a build that run at once (:func:`max_active_clusters`; None: all of
    them); ``b_transposed``: B is the transpose of a row-major (n, k) matrix at ``b_ptr``
    (``w.T``), read as it lies (the B_K_MAJOR build)."""
    if tile_n is None or stages is None:
        tile_n, stages = columns_build(n, sms)
    if tile_n not in (64, 128) or stages < 2:
        raise ValueError(f"the skinny GEMM builds tile_n 64 or 128 and 2 or more stages, got {tile_n}, {stages}")
    if dtype not in hg.DTYPES:
        raise ValueError(f"the skinny GEMM takes bfloat16 or float16 inputs, got {dtype}")
    hg.check_shapes(m, n, k, b_transposed)  # (C is stored element by element: any N where B's rows are K long)
    rows = rows_build(m)
    tiles, slices = -(-n // tile_n), -(-k // BK)
    if slices_per_run is None:
        fits = None if co_resident is None else functools.partial(co_resident, rows, tile_n, stages)
        per = split_k(tiles, slices, rows, sms, tile_n, fits)
    else:
        per = slices_per_run
    if not 1 <= per:
        raise ValueError(f"slices_per_run must be >= 1, got {per}")
    per = min(per, slices)
    runs = -(-slices // per)
    if runs > MAX_RUNS:
        raise ValueError(f"slices_per_run={per}: {runs} runs of {slices} K slices; a tile's runs are one cluster "
                         f"of at most {MAX_RUNS} blocks")
    map_b = (hg.tensor_map_args("b", b_ptr, n, k, dtype, CHUNK_N, BK) if b_transposed  # (W = B^T: n x k)
             else hg.tensor_map_args("b", b_ptr, k, n, dtype, BK, CHUNK_N))
    maps = (hg.tensor_map_args("a", a_ptr, m, k, dtype, rows, BK), map_b)
    smem = shared_mem_bytes(rows, tile_n, stages)
    if smem > hg.MAX_BLOCK_SHARED:
        raise ValueError(f"{stages} stages of {tile_n} x 64 need {smem} bytes of shared memory")
    a_edges = tuple(hg.tensor_map_args("a", a_ptr, m, k, dtype, r, BK) for r in hg.EDGE_BOX_ROWS)
    return SkinnyPlan(f"gemm_hopper_skinny_{hg.DTYPES[dtype]}", rows, tile_n, stages, tiles, runs, per, smem, maps,
                      b_transposed, a_edges)


@functools.lru_cache(maxsize=None)
def module(rows: int, arch: str, tile_n: int = TILE_N, stages: int = STAGES, b_k_major: bool = False):
    """The compiled build (both dtypes); usable without a GPU. ``b_k_major``: B read as
    the transpose of a row-major (N, K) matrix."""
    defines = {"ROWS": rows}
    if b_k_major:
        defines["B_K_MAJOR"] = 1
    if tile_n != TILE_N:
        defines["TILE_N"] = tile_n
    if stages != STAGES:
        defines["STAGES"] = stages
    return compiler.compile_package_kernel(SOURCE, arch=arch, defines=defines)


@functools.lru_cache(maxsize=None)
def max_active_clusters(device_index: int, arch: str, b_k_major: bool, rows: int, tile_n: int, stages: int,
                        runs: int) -> int:
    """How many clusters of ``runs`` blocks of a build (``b_k_major``, ``rows``, ``tile_n``,
    ``stages``) the GPU runs at once (cuOccupancyMaxActiveClusters); SMs // runs where the
    driver cannot say."""
    if runs <= 1:
        return arch_and_sm_count(device_index)[1]
    return hg.clusters_at_once(lambda: module(rows, arch, tile_n, stages, b_k_major).kernel("gemm_hopper_skinny_bf16"),
                               THREADS, shared_mem_bytes(rows, tile_n, stages), runs, device_index)


def _prepare(p: SkinnyPlan, c_ptr: int, m: int, n: int, k: int, stream_handle: int, device_index: int,
             arch: str) -> hg._Launch:
    from cuda.bindings import driver as d

    kernel = module(p.rows, arch, p.tile_n, p.stages, p.b_transposed).kernel(p.kernel)
    set_max_dynamic_shared_memory(kernel, p.shared_mem, device_index)
    if len(p.a_edges) != len(hg.EDGE_BOX_ROWS):
        raise ValueError("a skinny plan needs A's edge maps (the kernel's EdgeMaps): use plan()")
    raw = [hg._encoded(t) for t in p.maps] + [b"".join(hg._encoded(t) for t in p.a_edges)]
    raw += [struct.pack("<Q", c_ptr), struct.pack("<i", m), struct.pack("<i", n), struct.pack("<i", k),
            struct.pack("<i", p.slices_per_run)]
    params, bufs, _ = hg.pack_params(raw)
    cfg = hg._launch_config(p.grid, THREADS, p.shared_mem, d.CUstream(stream_handle), p.cluster)
    return hg._Launch(kernel, cfg, params, bufs, p, stream_handle)


# Recent launches, by everything that goes into them (as hopper_gemm._LAUNCHES).
_LAUNCHES: dict[tuple, hg._Launch] = {}


def gemm_skinny(a: Any, b: Any, *, out: Any = None, stream: Any = None, _slices_per_run: int | None = None,
                _build: tuple[int, int] | None = None) -> Any:
    """``out = a @ b`` for a bf16/fp16 (M <= 128, K) device array and a (K, N) one (torch,
    CuPy or fullpipe), fp32 accumulation, result in the input dtype, enqueued on
    ``stream`` (default: torch's/CuPy's current stream for their arrays); returns ``out``.
    ``b`` may be ``w.T`` of a row-major (N, K) ``w`` (an nn.Linear weight), read as it lies.
    ``_slices_per_run``, ``_build`` (tile_n, stages): the experiments' split of K and build."""
    return run(operand(a, "a"), operand(b, "b", transposed_ok=True), out, stream, _slices_per_run, _build)


def run(A: Operand, B: Operand, out: Any, stream: Any, slices_per_run: int | None = None,
        build: tuple[int, int] | None = None) -> Any:
    """:func:`gemm_skinny` on parsed operands (``gemm(variant=...)`` comes here having
    parsed them once)."""
    if A.dtype not in hg.DTYPES:
        raise ValueError(f"gemm_skinny takes bfloat16 or float16 inputs, got {A.dtype}")
    m, n, k = matmul_shape(A, B)
    hg.check_shapes(m, n, k, B.transposed)
    rows_build(m)
    out, C, handle = hg.prepare_output(A, B, out, stream, pitched_ok=True)
    if C.pitch:  # (rows further apart than N: the kernel writes rows N apart, then a 2-D copy)
        hg.via_scratch(A, C, m, n, n, handle, stream is None,
                       lambda at: _enqueue(A, B, at, handle, slices_per_run, build))
        return out
    _enqueue(A, B, C.ptr, handle, slices_per_run, build)
    return out


def _enqueue(A: Operand, B: Operand, c_ptr: int, handle: int, slices_per_run: int | None,
             build: tuple[int, int] | None) -> None:
    """Launch the skinny kernel for ``A @ B`` into C at ``c_ptr`` (rows N apart) on the stream
    ``handle``: the launch of recent operands again (_LAUNCHES), else planned and prepared."""
    m, n, k = matmul_shape(A, B)
    device_index = A.device_index
    key = (slices_per_run, build, A.dtype, m, n, k, A.ptr, B.ptr, B.transposed, c_ptr, handle, device_index)
    launch = _LAUNCHES.get(key)
    if launch is None:
        arch, sms = arch_and_sm_count(device_index)
        tile_n, stages = build or (None, None)
        p = plan(m, n, k, A.dtype, A.ptr, B.ptr, sms=sms, slices_per_run=slices_per_run, tile_n=tile_n, stages=stages,
                 co_resident=functools.partial(max_active_clusters, device_index, arch, B.transposed),
                 b_transposed=B.transposed)
        launch = _prepare(p, c_ptr, m, n, k, handle, device_index, arch)
        if len(_LAUNCHES) >= hg.LAUNCH_CACHE_SIZE:
            _LAUNCHES.clear()
        _LAUNCHES[key] = launch
    launch.enqueue()


def _selftest(argv: list[str] | None = None) -> int:
    """Small checked runs of every ROWS build, one run and split (for compute-sanitizer);
    exit 1 on a wrong result."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m fullpipe.kernels.skinny_gemm")
    ap.add_argument("--selftest", action="store_true", required=True)
    ap.add_argument("--dtype", choices=list(hg.DTYPES), default="bfloat16")
    ap.add_argument("--b-transposed", action="store_true", help="b as w.T of a row-major (N, K) w")
    args = ap.parse_args(argv)
    import torch

    # (edges: N not a multiple of 128, K not of 64; M of every build; one run and several)
    shapes = [(1, 8, 8), (5, 200, 72), (8, 512, 2048), (16, 136, 1000), (33, 1032, 520), (64, 256, 4096),
              (100, 264, 1032), (4, 8512, 640), (120, 8512, 256)]   # (the last two: 128-column blocks)
    bad = 0
    for m, n, k in shapes:
        slices = -(-k // BK)
        for per in (None, slices, -(-slices // MAX_RUNS)):   # the default split, one run, up to 8 runs
            g = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
            dt = getattr(torch, args.dtype)
            a = torch.randn(m, k, device="cuda", generator=g).to(dt)
            if args.b_transposed:
                b = torch.randn(n, k, device="cuda", generator=g).to(dt).T
            else:
                b = torch.randn(k, n, device="cuda", generator=g).to(dt)
            out = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
            gemm_skinny(a, b, out=out, _slices_per_run=per)
            torch.cuda.synchronize()
            ref = a.double() @ b.double()
            err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
            ok = err < 1e-2 and not torch.isnan(out).any()
            bad += not ok
            split = "default" if per is None else f"{-(-slices // per)} runs"
            layout = " b=w.T" if args.b_transposed else ""
            print(f"{'ok  ' if ok else 'BAD '} skinny {args.dtype} {m}x{n}x{k}{layout} {split:8s} rel err {err:.2e}",
                  flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    import sys

    sys.exit(_selftest())
