"""The KV cache of a decode batch: pages from a stream-ordered pool, a page table on the GPU.

    cache = PagedKVCache(config, sequences=8, pool=pool, page_tokens=64)
    cache.reserve(lengths + steps, stream)   # pages for every slot the next steps write
    ... kernels read cache.page_table and cache.seq_lens ...
    cache.release(stream)                    # every page back to the pool, in stream order

A page is ONE allocation of ``page_tokens`` (P) token slots for every layer, K and V,
laid out ``[layers][2 (K, V)][kv_heads][P][head_dim]`` (what
:mod:`fullpipe.kernels.decode_attention` reads). Sequence ``b``'s slot ``t`` lives in page
``page_table[b, t // P]`` at row ``t % P``. Pages are taken from the pool as the
sequences grow, so the cache holds what the sequences use, rounded up to a page, instead
of ``max_context`` slots per sequence; the pool hands freed pages to the next batch
without a ``cudaMalloc``.

The page table (``int64 [sequences, max_pages]``, page base addresses, 0 where none) and
the cached lengths (``int32 [sequences]``) live on the GPU: a decode step replayed as a
CUDA graph reads them from memory, and advances the lengths itself, so the host only
has to :meth:`reserve` pages before the steps that need them. The host keeps its own
copy of the page table and uploads it from pinned memory when a page is added, in stream
order (never a host wait).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .config import StackConfig

PAGE_TOKENS = (16, 32, 64, 128, 256)


def page_bytes(config: StackConfig, page_tokens: int) -> int:
    """Bytes of one page: ``page_tokens`` slots of K and V in every layer."""
    return config.layers * 2 * config.kv_heads * page_tokens * config.head_dim * config.element_bytes


def pages_for(tokens: int, page_tokens: int) -> int:
    return -(-int(tokens) // page_tokens)


class PagedKVCache:
    def __init__(self, config: StackConfig, sequences: int, *, pool: Any, page_tokens: int = 64,
                 device: Any = "cuda", capacity: int | None = None):
        """``sequences``: rows of the batch. ``pool``: where pages come from (a
        :class:`~fullpipe.cuda.pool.DevicePool`, or anything with ``allocate_ptr(nbytes,
        stream)`` and ``free_ptr(ptr, stream)``). ``capacity``: the most tokens a sequence
        may hold (default ``config.max_context``)."""
        import torch

        if isinstance(sequences, bool) or not isinstance(sequences, int) or sequences < 1:
            raise ValueError(f"sequences must be an int >= 1, got {sequences!r}")
        if page_tokens not in PAGE_TOKENS:
            raise ValueError(f"page_tokens must be one of {PAGE_TOKENS}, got {page_tokens!r}")
        capacity = config.max_context if capacity is None else capacity
        if isinstance(capacity, bool) or not isinstance(capacity, int) or not 1 <= capacity <= config.max_context:
            raise ValueError(f"capacity must be an int in 1..max_context ({config.max_context}), got {capacity!r}")
        self.config, self.sequences, self.pool = config, sequences, pool
        self.page_tokens, self.capacity = page_tokens, capacity
        self.page_bytes = page_bytes(config, page_tokens)
        self.max_pages = pages_for(capacity, page_tokens)
        self.device = torch.device(device)
        self._table = np.zeros((sequences, self.max_pages), dtype=np.int64)  # the host's copy
        self._pages = [0] * sequences  # pages held by each sequence
        self.page_table = torch.zeros((sequences, self.max_pages), dtype=torch.int64, device=self.device)
        self.seq_lens = torch.zeros(sequences, dtype=torch.int32, device=self.device)
        self.pages_allocated = 0  # every page ever taken (a page per P tokens: the growth)
        self._released = False

    # ------------------------------------------------------------------ sizes
    @property
    def pages_held(self) -> int:
        return sum(self._pages)

    @property
    def held_bytes(self) -> int:
        return self.pages_held * self.page_bytes

    @property
    def preallocated_bytes(self) -> int:
        """What a cache of ``capacity`` slots per sequence, allocated up front, would hold."""
        return self.sequences * self.capacity * self.config.kv_bytes_per_token

    def slots(self, sequence: int) -> int:
        """Token slots sequence ``sequence`` has pages for."""
        return self._pages[sequence] * self.page_tokens

    # ------------------------------------------------------------------ growth
    def reserve(self, tokens: Any, stream: Any) -> int:
        """Make sure sequence ``b`` has slots for ``tokens[b]`` tokens: take the missing
        pages from the pool on ``stream`` and upload the changed page table on it. Returns
        the number of pages added. A sequence that would pass ``capacity`` raises a
        ValueError naming it, before any page is taken."""
        if self._released:
            raise RuntimeError("this cache was released")
        want = np.asarray(tokens, dtype=np.int64).reshape(-1)
        if want.shape != (self.sequences,):
            raise ValueError(f"tokens must have one entry per sequence ({self.sequences}), got shape {want.shape}")
        over = np.nonzero(want > self.capacity)[0]
        if over.size:
            b = int(over[0])
            raise ValueError(f"sequence {b} would hold {int(want[b])} tokens, above the cache's capacity "
                             f"of {self.capacity} (max_context {self.config.max_context})")
        added = 0
        for b in range(self.sequences):
            need = pages_for(int(want[b]), self.page_tokens)
            while self._pages[b] < need:
                self._table[b, self._pages[b]] = self.pool.allocate_ptr(self.page_bytes, stream)
                self._pages[b] += 1
                added += 1
        if added:
            self.pages_allocated += added
            upload(self.page_table, self._table, stream)
        return added

    def set_lengths(self, lengths: Any, stream: Any = None) -> None:
        """Upload the cached lengths (int32, one per sequence), in stream order on
        ``stream`` (default: PyTorch's current stream). They must fit the reserved slots."""
        lengths = np.asarray(lengths, dtype=np.int32).reshape(-1)
        for b, n in enumerate(lengths):
            if n > self.slots(b):
                raise ValueError(f"sequence {b}: length {int(n)} is above its {self.slots(b)} reserved slots")
        upload(self.seq_lens, lengths, stream)

    def release(self, stream: Any) -> None:
        """Every page back to the pool, in stream order on ``stream`` (after the last
        kernel that reads them, when that kernel was enqueued on ``stream``)."""
        if self._released:
            return
        self._released = True
        for b in range(self.sequences):
            for j in range(self._pages[b]):
                self.pool.free_ptr(int(self._table[b, j]), stream)
            self._pages[b] = 0
        self._table[:] = 0


def upload(dst: Any, host: np.ndarray, stream: Any = None) -> None:
    """A small host array into a device tensor without a host wait: from pinned memory
    (PyTorch's pinned block is not reused before the copy has run), on ``stream`` (any
    stream fullpipe takes; default: PyTorch's current stream). On the CPU, a plain copy."""
    import torch

    src = torch.from_numpy(np.ascontiguousarray(host))
    if not dst.is_cuda:
        dst.copy_(src)
    elif stream is None:
        dst.copy_(src.pin_memory(), non_blocking=True)
    else:
        from ..cuda.interop import torch_stream

        with torch.cuda.stream(torch_stream(stream, dst.device.index)):
            dst.copy_(src.pin_memory(), non_blocking=True)
