"""Decode attention over a paged KV cache (decode_attention.cu): one query token per
sequence against all of its cached tokens, split over the cached tokens (flash-decoding).

    split_tokens, max_splits = plan_decode(batch, heads, kv_heads, max_context, page_tokens, sm_count)
    partial = torch.empty(decode_workspace_bytes(batch, heads, head_dim, max_splits), dtype=torch.uint8, device=...)
    kv_write(k, v, page_table, seq_ids, positions, layer, layers, page_tokens)       # new tokens into their pages
    decode_attention(q, out, page_table, seq_lens, layer, layers, page_tokens,
                     kv_heads=kv_heads, split_tokens=split_tokens, partial=partial)

The cache's layout is :mod:`fullpipe.models.kv_cache`'s: a page of ``page_tokens`` slots
for every layer, K and V, ``[layers][2][kv_heads][page_tokens][head_dim]``; ``page_table``
int64 ``[batch, max_pages]`` of page addresses; ``seq_lens`` int32 ``[batch]``, the cached
tokens of each sequence with the current one (written by ``kv_write`` first). Lengths and
pages are read by the kernels from memory and the grid depends only on ``max_splits``,
so a captured launch stays right while the sequences grow.

Shapes: ``q`` and ``out`` ``[batch, heads, head_dim]``; ``k``, ``v`` ``[tokens, kv_heads,
head_dim]``; ``seq_ids``, ``positions`` int32 ``[tokens]`` (token t goes to sequence
``seq_ids[t]``, slot ``positions[t]``); head_dim 64 or 128; bfloat16 or float16; heads a
multiple of kv_heads with at most 8 query heads per K/V head. Outputs are given (nothing
is allocated: the calls can be captured in a CUDA graph); ``stream`` as the elementwise
kernels take it (None: PyTorch's current stream).
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

from ._launcher import KernelSet
from .elementwise import _array, _check_aligned

SOURCE = "kernels/decode_attention.cu"
DTYPES = {"bfloat16": "bf16", "float16": "f16"}
HEAD_DIMS = (64, 128)
GROUP_BUILDS = (1, 2, 4, 8)  # query heads per K/V head a split build holds
SPLIT_THREADS = 128  # WARPS * 32 in decode_attention.cu
WRITE_THREADS = 256
VEC = 8
# plan_decode: aim for this many split blocks per SM at the longest context, never a split
# of fewer tokens than MIN_SPLIT_TOKENS (a block's fixed cost: the queries, the merge).
BLOCKS_PER_SM = 8
MIN_SPLIT_TOKENS = 128

_u64, _i32, _f32 = ctypes.c_uint64, ctypes.c_int32, ctypes.c_float
_SIGNATURES = {
    "kv_write": [_u64, _u64, _u64, _u64, _u64, _i32, _i32, _i32, _i32, _i32],
    "split": [_u64, _u64, _u64, _u64, _u64, _i32, _i32, _i32, _i32, _i32, _i32, _i32, _f32],
    "combine": [_u64, _u64, _u64, _u64, _i32, _i32, _i32],
}


def kernel_names() -> list[str]:
    names = []
    for tag in DTYPES.values():
        for d in HEAD_DIMS:
            names += [f"kv_write_{tag}_d{d}", f"decode_combine_{tag}_d{d}"]
            names += [f"decode_split_{tag}_d{d}_g{g}" for g in GROUP_BUILDS]
    return names


def group_build(heads: int, kv_heads: int) -> int:
    """The split build for ``heads / kv_heads`` query heads per K/V head."""
    group = heads // kv_heads
    for g in GROUP_BUILDS:
        if g >= group:
            return g
    raise ValueError(f"heads / kv_heads = {group}: decode attention holds at most {GROUP_BUILDS[-1]} query heads "
                     "per K/V head")


def plan_decode(batch: int, heads: int, kv_heads: int, max_context: int, page_tokens: int,
                sm_count: int) -> tuple[int, int]:
    """(split_tokens, max_splits) for a decode of ``batch`` sequences of at most
    ``max_context`` tokens.

    The rule: a block per (split, K/V head, sequence). Split so that a batch whose
    sequences all reach ``max_context`` gives about ``BLOCKS_PER_SM`` blocks per SM
    (enough loads in flight to keep HBM busy), with splits of whole pages and never fewer
    than ``MIN_SPLIT_TOKENS`` tokens (each block reads its queries and merges its lane
    groups: a fixed cost worth a few hundred bytes of K/V per lane). Shorter sequences
    use fewer of the splits; a split past a sequence's end exits at once."""
    for name, v in (("batch", batch), ("heads", heads), ("kv_heads", kv_heads), ("max_context", max_context),
                    ("page_tokens", page_tokens), ("sm_count", sm_count)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if heads % kv_heads:
        raise ValueError(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
    blocks_per_split = batch * kv_heads
    want_splits = max(1, -(-BLOCKS_PER_SM * sm_count // blocks_per_split))
    split = max(MIN_SPLIT_TOKENS, -(-max_context // want_splits))
    split = -(-split // page_tokens) * page_tokens  # whole pages
    return split, -(-max_context // split)


def decode_workspace_bytes(batch: int, heads: int, head_dim: int, max_splits: int) -> int:
    """Bytes of ``partial``: fp32 ``o`` ``[batch, heads, max_splits, head_dim]``, then fp32
    ``(m, l)`` ``[batch, heads, max_splits, 2]``."""
    rows = batch * heads * max_splits
    return 4 * rows * head_dim + 4 * rows * 2


# --------------------------------------------------------------------------- launching
_KERNELS = KernelSet(SOURCE, kernel_names(), _SIGNATURES)


def _int_array(x: Any, name: str, shape: tuple[int, ...], dtype: str, dev: int) -> int:
    ptr, s, dt, d = _array(x, name)
    if tuple(s) != shape or dt != dtype:
        raise ValueError(f"{name} must be a {shape} {dtype} array, got {tuple(s)} {dt}")
    if d != dev:
        raise ValueError(f"{name} is on device {d}, the other arrays on device {dev}: put them on one GPU")
    return ptr


def _table(page_table: Any, batch: int | None, dev: int) -> tuple[int, int]:
    """(pointer, max_pages) of a page table with ``batch`` rows (any number when None)."""
    ptr, s, dt, d = _array(page_table, "page_table")
    if len(s) != 2 or (batch is not None and s[0] != batch) or dt not in ("int64", "uint64"):
        raise ValueError(f"page_table must be a [{batch}, max_pages] int64 array of page addresses, got "
                         f"{tuple(s)} {dt}")
    if d != dev:
        raise ValueError(f"page_table is on device {d}, the other arrays on device {dev}: put them on one GPU")
    return ptr, s[1]


def _layer(layer: int, layers: int, page_tokens: int) -> None:
    if not (isinstance(layers, int) and layers >= 1 and isinstance(layer, int) and 0 <= layer < layers):
        raise ValueError(f"layer must be an int in 0..layers-1, got layer={layer!r}, layers={layers!r}")
    if not (isinstance(page_tokens, int) and page_tokens >= 1 and page_tokens & (page_tokens - 1) == 0):
        raise ValueError(f"page_tokens must be a power of 2, got {page_tokens!r}")


# --------------------------------------------------------------------------- the fronts
def kv_write(k: Any, v: Any, page_table: Any, seq_ids: Any, positions: Any, layer: int, layers: int,
             page_tokens: int, stream: Any = None) -> None:
    """Write each token's K and V (``[tokens, kv_heads, head_dim]``) into slot
    ``positions[t]`` of sequence ``seq_ids[t]`` of layer ``layer``'s part of the pages."""
    _layer(layer, layers, page_tokens)
    kp, shape, dtype, dev = _array(k, "k")
    if dtype not in DTYPES or len(shape) != 3 or shape[2] not in HEAD_DIMS:
        raise ValueError(f"k must be [tokens, kv_heads, 64 or 128] bfloat16/float16, got {tuple(shape)} {dtype}")
    tokens, kv_heads, d = shape
    vp, vs, vdt, vdev = _array(v, "v")
    if tuple(vs) != tuple(shape) or vdt != dtype or vdev != dev:
        raise ValueError(f"v must match k ({tuple(shape)} {dtype} on device {dev}), got {tuple(vs)} {vdt}")
    _check_aligned("k", kp)
    _check_aligned("v", vp)
    sp = _int_array(seq_ids, "seq_ids", (tokens,), "int32", dev)
    pp = _int_array(positions, "positions", (tokens,), "int32", dev)
    tp, max_pages = _table(page_table, None, dev)
    if dev < 0:
        raise ValueError("k is on the CPU: decode attention runs on a GPU")
    if not tokens:
        return
    items = tokens * kv_heads * d // VEC
    grid = max(1, min(-(-items // WRITE_THREADS), _KERNELS.on(dev).sm_count * 16))
    _KERNELS.launch("kv_write", f"kv_write_{DTYPES[dtype]}_d{d}", dev, grid, WRITE_THREADS, stream,
                    kp, vp, tp, sp, pp, tokens, kv_heads, max_pages, page_tokens, layer)


def decode_attention(q: Any, out: Any, page_table: Any, seq_lens: Any, layer: int, layers: int, page_tokens: int, *,
                     kv_heads: int, split_tokens: int, partial: Any, stream: Any = None,
                     scale: float | None = None) -> Any:
    """``out[b, h] = softmax(q[b, h] . K_b^T * scale) V_b`` over the ``seq_lens[b]`` cached
    tokens of sequence b (query head h reads K/V head ``h // (heads // kv_heads)``);
    returns ``out``."""
    _layer(layer, layers, page_tokens)
    qp, shape, dtype, dev = _array(q, "q")
    if dtype not in DTYPES or len(shape) != 3 or shape[2] not in HEAD_DIMS:
        raise ValueError(f"q must be [batch, heads, 64 or 128] bfloat16/float16, got {tuple(shape)} {dtype}")
    batch, heads, d = shape
    if isinstance(kv_heads, bool) or not isinstance(kv_heads, int) or kv_heads < 1 or heads % kv_heads:
        raise ValueError(f"kv_heads must be a positive int dividing heads ({heads}), got {kv_heads!r}")
    g = group_build(heads, kv_heads)
    if isinstance(split_tokens, bool) or not isinstance(split_tokens, int) or split_tokens < 1 \
            or split_tokens % page_tokens:
        raise ValueError(f"split_tokens must be a positive multiple of page_tokens ({page_tokens}), got {split_tokens!r}")
    op, os_, odt, odev = _array(out, "out")
    if tuple(os_) != tuple(shape) or odt != dtype or odev != dev:
        raise ValueError(f"out must match q ({tuple(shape)} {dtype} on device {dev}), got {tuple(os_)} {odt}")
    lp = _int_array(seq_lens, "seq_lens", (batch,), "int32", dev)
    tp, max_pages = _table(page_table, batch, dev)
    wp, ws, wdt, wdev = _array(partial, "partial")
    nbytes = math.prod(ws) * {"uint8": 1, "int8": 1, "float32": 4}.get(wdt, 0)
    max_splits = -(-max_pages * page_tokens // split_tokens)
    need = decode_workspace_bytes(batch, heads, d, max_splits)
    if wdev != dev or nbytes < need:
        raise ValueError(f"partial must be a uint8 or float32 array of at least {need} bytes on device {dev} "
                         f"(decode_workspace_bytes), got {nbytes} bytes on device {wdev}")
    _check_aligned("partial", wp)
    if dev < 0:
        raise ValueError("q is on the CPU: decode attention runs on a GPU")
    if not batch:
        return out
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    part_o, part_ml = wp, wp + 4 * batch * heads * max_splits * d
    tag = DTYPES[dtype]
    _KERNELS.launch("split", f"decode_split_{tag}_d{d}_g{g}", dev, max_splits, SPLIT_THREADS, stream,
                    qp, tp, lp, part_o, part_ml, heads, kv_heads, max_pages, page_tokens, layer, split_tokens,
                    max_splits, scale * 1.4426950408889634, grid_y=kv_heads, grid_z=batch)
    _KERNELS.launch("combine", f"decode_combine_{tag}_d{d}", dev, heads, d, stream,
                    part_o, part_ml, lp, op, heads, split_tokens, max_splits, grid_y=batch)
    return out
