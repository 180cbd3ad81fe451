"""Thread-block clusters: share a tile through distributed shared memory.

:func:`cluster_gemm` computes ``a @ b`` (float32) with clusters of
:data:`CLUSTER` blocks along N, which all need the same A slice at every K step.
With ``share_a=True`` each block of the cluster loads one quarter of that slice
from global memory (plain 16-byte loads through registers, not cp.async: see the
top of cluster_gemm.cu for why) and every block gathers the whole slice from the
four quarters through distributed shared memory (``cluster.map_shared_rank``): A
is read from global memory once per cluster. With ``share_a=False`` every block
copies the whole slice itself with cp.async (the baseline). B is copied with
cp.async by both. Source: cluster_gemm.cu (the ordering of the DSMEM hand-off is
explained at its top).

    python -m fullpipe.kernels.cluster --selftest   # small checked runs (sanitizers)
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ..cuda.launch import launch
from ._operands import arch_and_sm_count
from .gemm import _float32_cp_async_operands, _module

SOURCE = "kernels/cluster_gemm.cu"
CLUSTER = 4
TILE = 64
THREADS = 256
TILE_K = 32  # K slice per pipeline step (T_K in cluster_gemm.cu)
STAGES = 4  # cp.async ring depth (STAGES in cluster_gemm.cu)
KERNELS = {False: "cluster_gemm_own_a", True: "cluster_gemm_shared_a"}
CLUSTER_TUNINGS = tuple((tk, st) for tk in (16, 32) for st in (3, 4, 5, 6))  # (tile_k, stages) check_config accepts


def grid_for(m: int, n: int) -> tuple[int, int]:
    tiles_n = -(-n // TILE)
    return (-(-tiles_n // CLUSTER) * CLUSTER, -(-m // TILE))


def shared_mem_bytes(share_a: bool, tile_k: int = TILE_K, stages: int = STAGES) -> int:
    """Dynamic shared memory per block (OWN_A_SMEM_BYTES / SHARED_A_SMEM_BYTES)."""
    a_elems = TILE * (tile_k + 4)  # padded working A slice
    b_elems = tile_k * TILE
    if share_a:
        q_elems = (TILE // CLUSTER) * tile_k
        return (stages * (q_elems + b_elems) + 2 * a_elems) * 4
    return stages * (a_elems + b_elems) * 4


def a_slice_loads(m: int, n: int, k: int, share_a: bool) -> int:
    """Bytes of A the kernel reads from global memory (by construction; ncu checks it):
    every block copies 64 x K of A, or, with ``share_a``, loads 16 x K (K rounded up
    to whole slices; nothing is loaded past the last slice)."""
    gx, gy = grid_for(m, n)
    rows_per_block = TILE // CLUSTER if share_a else TILE
    return gx * gy * rows_per_block * (-(-k // TILE_K) * TILE_K) * 4


# The instruction each kernel reads its A rows from global memory with: own_a copies the
# whole slice with cp.async (LDGSTS); shared_a loads its quarter through registers (LDG).
A_LOAD_OP = {False: "LDGSTS", True: "LDG"}


def loads_per_block(k: int, share_a: bool, tile_k: int = TILE_K) -> dict[str, int]:
    """Warp-level global load instructions one block executes, by construction:
    ``"A"`` and ``"B"`` per operand, ``"LDGSTS"`` and ``"LDG"`` per instruction (what
    ``smsp__inst_executed_op_ldgsts.sum`` and ``smsp__inst_executed_op_global_ld.sum``
    count, divided by the number of blocks).

    Per K slice: B is T_K x 64 floats in 16-byte chunks, one cp.async per thread and
    chunk, so chunks / 32 LDGSTS. own_a copies its 64 x T_K A slice the same way
    (LDGSTS); shared_a loads its 16 x T_K quarter with one LDG.E.128 per thread of
    the first chunks / 32 warps (the other warps branch around it). Every block, edge
    blocks included, executes these for every slice (out-of-range chunks are loaded
    from a valid address and zeroed), and nothing past the last slice."""
    slices = -(-k // tile_k)
    a_rows = TILE // CLUSTER if share_a else TILE
    a = slices * -(-(a_rows * tile_k // 4) // 32)
    b = slices * -(-(tile_k * TILE // 4) // 32)
    return {"A": a, "B": b, "LDGSTS": b + (0 if share_a else a), "LDG": a if share_a else 0}


@functools.lru_cache(maxsize=None)
def _variant_module(arch: str, tile_k: int, stages: int, full_barriers: bool = False):
    from ..cuda import compiler

    defines = {"T_K": tile_k, "STAGES": stages}
    if full_barriers:  # diagnostic build: every cluster phase is a plain cluster.sync()
        defines["CLUSTER_FULL_BARRIERS"] = 1
    return compiler.compile_package_kernel(SOURCE, arch=arch, defines=defines)


def check_config(tile_k: int, stages: int) -> None:
    if tile_k not in (16, 32):
        raise ValueError(f"tile_k must be 16 or 32, got {tile_k!r}")
    if not isinstance(stages, int) or (tile_k, stages) not in CLUSTER_TUNINGS:
        raise ValueError(f"stages must be 3 .. 6 (shared_a keeps 3 slices in flight), got {stages!r}")


def cluster_gemm(a: Any, b: Any, *, share_a: bool = True, stream: Any, out: Any = None,
                 tile_k: int = TILE_K, stages: int = STAGES, _full_barriers: bool = False) -> Any:
    """``out = a @ b`` (float32) with 4-block clusters; returns ``out``.

    Needs M, N, K >= 1, K and N multiples of 4 and 16-byte aligned arrays.
    ``tile_k`` (16 or 32) and ``stages`` (3 .. 6) tune both kernels alike.
    """
    check_config(tile_k, stages)
    A, B, out, C, s, m, n, k = _float32_cp_async_operands(a, b, out, stream, "cluster_gemm", nonempty=True)
    arch, _ = arch_and_sm_count(A.device_index)
    if (tile_k, stages, _full_barriers) == (TILE_K, STAGES, False):
        mod = _module(SOURCE, arch)
    else:
        mod = _variant_module(arch, tile_k, stages, bool(_full_barriers))
    kernel = mod.kernel(KERNELS[bool(share_a)])
    launch(s, kernel, grid_for(m, n), THREADS, np.uint64(A.ptr), np.uint64(B.ptr), np.uint64(C.ptr),
           np.int32(m), np.int32(n), np.int32(k), shared_mem=shared_mem_bytes(bool(share_a), tile_k, stages),
           cluster=(CLUSTER, 1, 1), device_index=A.device_index)
    return out


def _selftest(argv: list[str] | None = None) -> int:
    """Small checked runs of both kernels (for compute-sanitizer); exit 1 on a wrong result."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m fullpipe.kernels.cluster")
    ap.add_argument("--selftest", action="store_true", required=True)
    ap.add_argument("--size", type=int, default=0, help="one square size instead of the small odd shapes")
    ap.add_argument("--only", choices=["own_a", "shared_a"], default=None)
    ap.add_argument("--full-barriers", action="store_true",
                    help="diagnostic build: every cluster phase is a plain cluster.sync() (arrive + wait at once)")
    args = ap.parse_args(argv)
    import torch

    from ..cuda.device import Device
    from ..cuda.streams import create_stream

    stream = create_stream(Device(0))
    shapes = [(args.size,) * 3] if args.size else [(200, 520, 100), (64, 64, 16), (130, 68, 40)]
    bad = 0
    for m, n, k in shapes:
        for share in (False, True):
            if args.only and args.only != ("shared_a" if share else "own_a"):
                continue
            for tk in ((TILE_K,) if args.size else (16, 32)):
                g = torch.Generator(device="cuda").manual_seed(m + n + k)
                a = torch.randn(m, k, device="cuda", generator=g)
                b = torch.randn(k, n, device="cuda", generator=g)
                out = torch.full((m, n), float("nan"), device="cuda")
                torch.cuda.synchronize()
                cluster_gemm(a, b, share_a=share, stream=stream, out=out, tile_k=tk, _full_barriers=args.full_barriers)
                stream.sync()
                ref = a.double() @ b.double()
                err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
                ok = err < 1e-4 and not torch.isnan(out).any()
                bad += not ok
                tag = " full-barriers" if args.full_barriers else ""
                print(f"{'ok  ' if ok else 'BAD '} {KERNELS[share]:24s} T_K={tk}{tag} {m}x{n}x{k}  rel err {err:.2e}",
                      flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    import sys

    sys.exit(_selftest())
