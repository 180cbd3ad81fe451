"""Memory plans of the stack, as pure functions of the config and the request lengths.

Prefill scratch. One prefill of a packed batch (``T`` tokens, ``R`` requests) needs
these device buffers, all sized by the real token count (``T = sum(lengths)``), laid out
in ONE allocation (:class:`ScratchPlan`, regions aligned to 256 bytes) that the stack
takes from fullpipe's stream-ordered pool and returns after the batch. The per-layer
buffers are reused by every layer (the layers run one after another on one stream):

====================  ==========================  ===========================================
region                shape                       holds
====================  ==========================  ===========================================
tokens                int32 [T]                   the packed token ids
positions             int32 [T]                   each token's position in its own request
cu_seqlens            int32 [R + 1]               request offsets (attention's varlen layout)
last_token            int64 [R]                   packed index of each request's last token
x                     [T, width]                  the residual stream
h                     [T, width]                  RMSNorm output (input of each projection)
qkv                   [T, (Hq + 2 Hkv) D]         the fused Q, K, V projection
q, k, v               [T, Hq, D], [T, Hkv, D] x2  after RoPE (q, k); v contiguous
attn                  [T, Hq D]                   attention output
proj                  [T, width]                  output of W_o, then of W_down
gate_up               [T, 2 ffn_width]            the fused gate and up projections
act                   [T, ffn_width]              silu(gate) * up
last_hidden           [R, width]                  final RMSNorm of each request's last token
====================  ==========================  ===========================================

Not in the plan: the logits (``[R, vocab]``, returned to the caller, so from PyTorch's
allocator) and the temporaries of the PyTorch elementwise pieces (RMSNorm, RoPE, SwiGLU
upcast to float32 inside PyTorch's caching allocator, on the same stream).

:func:`padded_scratch_bytes` is the same layout sized for ``R x max(lengths)`` tokens:
what preallocating for the longest request would hold.

KV cache (decode, the next slice): :func:`kv_cache_plan` gives the bytes per token per
layer, what the cache holds after prefill, how it grows per generated token and what a
cache preallocated for ``max_context`` per request would hold.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from .config import StackConfig

ALIGN = 256


@dataclasses.dataclass(frozen=True)
class Region:
    name: str
    shape: tuple[int, ...]
    dtype: str  # "int32", "int64", "uint8", or the config's dtype
    offset: int  # bytes from the start of the allocation
    nbytes: int


@dataclasses.dataclass(frozen=True)
class ScratchPlan:
    tokens: int
    requests: int
    regions: tuple[Region, ...]
    nbytes: int  # the whole allocation

    def region(self, name: str) -> Region:
        for r in self.regions:
            if r.name == name:
                return r
        raise KeyError(f"no region {name!r} in the scratch plan")


_ITEMSIZE = {"int32": 4, "int64": 8, "uint8": 1}


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def scratch_plan(config: StackConfig, tokens: int, requests: int) -> ScratchPlan:
    """The prefill scratch of ``tokens`` packed tokens from ``requests`` requests."""
    if tokens < 1 or requests < 1 or requests > tokens:
        raise ValueError(f"need 1 <= requests <= tokens, got {requests} requests and {tokens} tokens")
    c, T, R, dt = config, tokens, requests, config.dtype
    shapes: list[tuple[str, tuple[int, ...], str]] = [
        ("tokens", (T,), "int32"),
        ("positions", (T,), "int32"),
        ("cu_seqlens", (R + 1,), "int32"),
        ("last_token", (R,), "int64"),
        ("x", (T, c.width), dt),
        ("h", (T, c.width), dt),
        ("qkv", (T, c.qkv_width), dt),
        ("q", (T, c.heads, c.head_dim), dt),
        ("k", (T, c.kv_heads, c.head_dim), dt),
        ("v", (T, c.kv_heads, c.head_dim), dt),
        ("attn", (T, c.heads * c.head_dim), dt),
        ("proj", (T, c.width), dt),
        ("gate_up", (T, 2 * c.ffn_width), dt),
        ("act", (T, c.ffn_width), dt),
        ("last_hidden", (R, c.width), dt),
    ]
    regions, nbytes = layout(c, shapes)
    return ScratchPlan(T, R, tuple(regions), nbytes)


def layout(config: StackConfig, shapes: Sequence[tuple[str, tuple[int, ...], str]]) -> tuple[list[Region], int]:
    """Regions of one allocation for these (name, shape, dtype) buffers, one after another,
    each start aligned to ALIGN bytes; and the allocation's size."""
    regions = []
    offset = 0
    for name, shape, dtype in shapes:
        n = _ITEMSIZE.get(dtype, config.element_bytes)
        for s in shape:
            n *= s
        regions.append(Region(name, shape, dtype, offset, n))
        offset = _round_up(offset + n, ALIGN)
    return regions, offset


def packed_scratch_bytes(config: StackConfig, lengths: Sequence[int]) -> int:
    """Scratch bytes of a prefill of requests of these lengths, packed (no padding)."""
    return scratch_plan(config, int(sum(lengths)), len(lengths)).nbytes


def padded_scratch_bytes(config: StackConfig, lengths: Sequence[int]) -> int:
    """The same scratch preallocated for every request at the longest one's length."""
    return scratch_plan(config, len(lengths) * int(max(lengths)), len(lengths)).nbytes


@dataclasses.dataclass(frozen=True)
class KVCachePlan:
    bytes_per_token_per_layer: int
    bytes_per_token: int  # all layers
    after_prefill: int  # the prompts' K and V, every layer
    growth_per_step: int  # one generated token for every sequence of the batch
    preallocated: int  # max_context tokens per sequence, every layer

    def after_steps(self, steps: int) -> int:
        """Bytes the cache holds after ``steps`` decode steps (every sequence still going)."""
        if steps < 0:
            raise ValueError(f"steps must be >= 0, got {steps}")
        return self.after_prefill + steps * self.growth_per_step


def kv_cache_plan(config: StackConfig, lengths: Sequence[int]) -> KVCachePlan:
    """The KV cache of a decode batch whose prompts have these lengths."""
    if not lengths or min(lengths) < 1:
        raise ValueError(f"need at least one prompt of at least one token, got {list(lengths)}")
    per_layer = config.kv_bytes_per_token_per_layer
    per_token = config.kv_bytes_per_token
    return KVCachePlan(per_layer, per_token, int(sum(lengths)) * per_token, len(lengths) * per_token,
                       len(lengths) * config.max_context * per_token)
