"""What each role of a warp-specialized kernel does over time, from the kernel itself.

    out, blocks = gemm_role_stamps(a, b)        # the ws rung's ROLE_STAMPS build, first blocks stamped
    blocks[0].producer_wait                     # [(start_ns, end_ns)] per K slice: waiting for a free slot, then TMA
    blocks[0].consumer_wait[0], .consumer_mma[0]  # consumer warpgroup 0: waiting for the slice / its wgmma

The Hopper GEMM's warp-specialized rung (gemm_hopper_ws.cu) built with ROLE_STAMPS
writes %globaltimer stamps (ns, one clock for every SM) at each hand-off of its roles:
the producer before it waits for a free ring slot and after it issued the slice's TMA
loads; each consumer warpgroup before it waits for a slice, when the slice has landed,
and when that slice's wgmma has retired; the epilogue's start and end. This is the
"zoomed into one kernel" half of the two-level picture (the other half is the stream
timeline CUPTI records). Times come back relative to the first stamped block's start.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

CONSUMERS = 2  # consumer warpgroups (gemm_hopper_tile.cuh)
STAMP_BLOCKS = 4  # ROLE_STAMP_BLOCKS of gemm_hopper_ws.cu


def words_per_block(slices: int) -> int:
    """ROLE_STAMP_WORDS of gemm_hopper_ws.cu."""
    return 3 + 2 * slices + CONSUMERS * (3 * slices + 2)


@dataclasses.dataclass
class BlockRoles:
    block: int
    sm: int
    span: tuple[int, int]  # the block's start and end
    producer_wait: list[tuple[int, int]]  # per slice: waiting for a free slot, then issuing its TMA loads
    consumer_wait: list[list[tuple[int, int]]]  # per consumer warpgroup, per slice: waiting for the slice
    consumer_mma: list[list[tuple[int, int]]]  # per consumer warpgroup, per slice: landed -> its wgmma retired
    epilogue: list[tuple[int, int]]  # per consumer warpgroup

    def busy_fraction(self) -> float:
        """Share of the block's span in which a consumer warpgroup has a wgmma in flight."""
        spans = sorted(iv for wg in self.consumer_mma for iv in wg)
        busy, end = 0, None
        for s, e in spans:
            if end is None or s > end:
                busy += e - s
                end = e
            elif e > end:
                busy += e - end
                end = e
        return busy / max(1, self.span[1] - self.span[0])


def parse(raw: np.ndarray, slices: int, blocks: int) -> list[BlockRoles]:
    """The stamps of ``blocks`` blocks (``raw``: uint64, words_per_block(slices) each) as
    intervals in ns from the earliest block start."""
    w = words_per_block(slices)
    raw = np.asarray(raw, dtype=np.int64).reshape(blocks, w)
    t0 = int(raw[:, 0].min())
    out = []
    for b in range(blocks):
        r = raw[b] - t0
        prod = r[3:3 + 2 * slices].reshape(slices, 2)
        waits, mmas, epis = [], [], []
        for c in range(CONSUMERS):
            base = 3 + 2 * slices + c * (3 * slices + 2)
            per = r[base:base + 3 * slices].reshape(slices, 3)
            waits.append([(int(a), int(b_)) for a, b_, _ in per])
            mmas.append([(int(b_), int(e)) for _, b_, e in per])
            epis.append((int(r[base + 3 * slices]), int(r[base + 3 * slices + 1])))
        out.append(BlockRoles(b, int(raw[b, 2]), (int(r[0]), int(r[1])), [(int(a), int(e)) for a, e in prod],
                              waits, mmas, epis))
    return out


def gemm_role_stamps(a: Any, b: Any, *, out: Any = None, stream: Any = None) -> tuple[Any, list[BlockRoles]]:
    """``out = a @ b`` by the ws rung's stamped build (bf16/fp16 device arrays, as
    :func:`~fullpipe.kernels.gemm_hopper` takes them), and the role stamps of its first
    :data:`STAMP_BLOCKS` blocks. Waits for the GPU (a measurement, not a hot path)."""
    from ..cuda import driver as drv
    from ..cuda.device import ensure_current
    from ..cuda.streams import as_core_stream, stream_from_handle
    from . import hopper_gemm as hg
    from ._operands import arch_and_sm_count, empty_like_kind, matmul_shape, operand

    A, B = operand(a, "a"), operand(b, "b")
    m, n, k = matmul_shape(A, B)
    if A.dtype not in hg.DTYPES:
        raise ValueError(f"the Hopper GEMM takes bfloat16 or float16 inputs, got {A.dtype}")
    hg.check_shapes(m, n, k)
    s = as_core_stream(stream) if stream is not None else stream_from_handle(hg._stream_handle(None, A))
    if out is None:
        out, C = empty_like_kind(A, (m, n), A.dtype, s)
    else:
        C = operand(out, "out")
    arch, _ = arch_and_sm_count(A.device_index)
    p = hg.plan("ws", m, n, k, A.dtype, A.ptr, B.ptr, C.ptr)
    blocks = min(STAMP_BLOCKS, p.grid)
    slices = -(-k // hg.BK)
    nbytes = 8 * STAMP_BLOCKS * words_per_block(slices)
    ensure_current(A.device_index)
    ptr = int(drv.call("cuMemAlloc", nbytes))
    try:
        drv.call("cuMemsetD8", ptr, 0, nbytes)
        hg.launch_plan(p, A.ptr, B.ptr, C.ptr, m, n, k, stream=s, device_index=A.device_index, arch=arch,
                       stamps_ptr=ptr)
        s.sync()
        raw = np.zeros(nbytes // 8, dtype=np.uint64)
        drv.call("cuMemcpyDtoH", raw.ctypes.data, ptr, nbytes)
    finally:
        drv.call("cuMemFree", ptr)
    return out, parse(raw[:blocks * words_per_block(slices)], slices, blocks)
