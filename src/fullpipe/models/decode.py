"""Greedy decode on fullpipe's kernels: a paged KV cache, CUDA-graph steps, layerwise pipelining.

    dec = Decoder(stack, pool=pool)                       # stack: a DecoderStack(kernels="fullpipe")
    result = dec.generate(prompts, new_tokens=64)         # result.tokens: [valid prompts, 64] int

What one step does, for every sequence of the batch at once (one query token each), on
static buffers (so the step can be a CUDA graph):

    x = embedding[token]
    per layer: RMSNorm -> Q K V projection (cuBLAS at these few rows) -> RoPE ->
               kv_write (the token's K and V into its page) -> decode attention over the
               paged cache (split over the cached tokens, then combined) -> W_o -> residual
               + RMSNorm -> gate/up -> SwiGLU -> W_down -> residual
    logits = lm_head(RMSNorm(x)); token = argmax(logits); position += 1; length += 1

The step advances its own token, positions and cached lengths on the GPU, so
``steps_per_graph`` steps are one graph launch and the host only takes pages for the
steps ahead (:class:`~.kv_cache.PagedKVCache`) between launches. ``graph=False`` enqueues
the same kernels from Python every step.

Layerwise pipelining (``layer_groups=G`` > 1): the layers are cut into G groups, each on
its own stream, and the batch into G micro-batches with their own buffers. Stream g runs
group g of micro-batch 0, 1, ..., then of the next step's micro-batches; events order
group g after group g-1 of the same micro-batch, and group 0 of a step after the last
group of the step before. In the steady state group 1 works on micro-batch m while group
0 works on m+1: small batches whose kernels cannot fill the GPU alone fill it together.

Where the per-step activations live (``scratch``): ``"static"`` (default; one block per
micro-batch for the whole decode, which a graph needs), ``"pool"`` (a block per
micro-batch and step from the stream-ordered pool, freed in stream order after the step)
or ``"cudaMalloc"`` (``cuMemAlloc`` / ``cuMemFree`` per micro-batch and step: the
blocking allocator, to measure what it does to the layerwise pipeline). The last two
need ``graph=False``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from .config import StackConfig
from .decoder import DecoderStack
from .kv_cache import PagedKVCache
from .memory import Region, layout
from .requests import RequestError, check_requests, pack

SCRATCH = ("static", "pool", "cudaMalloc")

def state_buffers(config: StackConfig, rows: int) -> tuple[list[Region], int]:
    """What a micro-batch (``rows`` sequences) carries from one step to the next, as
    regions of one allocation: its tokens, their positions, its rows of the cache."""
    return layout(config, [
        ("tokens", (rows,), "int64"),  # this step's input token, then the next one (argmax)
        ("positions", (rows,), "int32"),  # each token's position: its sequence's length before it
        ("seq_ids", (rows,), "int32"),  # 0 .. rows-1: the kv_write row of each token
    ])


def step_buffers(config: StackConfig, rows: int, workspace_bytes: int) -> tuple[list[Region], int]:
    """The activations of one micro-batch's step (``rows`` sequences), as regions of one
    allocation (256-byte aligned), and its size; the layers reuse them one after another."""
    c, R, dt = config, rows, config.dtype
    return layout(c, [
        ("x", (R, c.width), dt),
        ("h", (R, c.width), dt),
        ("qkv", (R, c.qkv_width), dt),
        ("q", (R, c.heads, c.head_dim), dt),
        ("k", (R, c.kv_heads, c.head_dim), dt),
        ("v", (R, c.kv_heads, c.head_dim), dt),
        ("attn", (R, c.heads * c.head_dim), dt),
        ("proj", (R, c.width), dt),
        ("gate_up", (R, 2 * c.ffn_width), dt),
        ("act", (R, c.ffn_width), dt),
        ("logits", (R, c.vocab), dt),
        ("workspace", (int(workspace_bytes),), "uint8"),  # decode attention's split partials
    ])


def split_rows(rows: int, parts: int) -> list[range]:
    """``rows`` sequences cut into ``parts`` contiguous micro-batches, sizes within one."""
    if parts < 1 or parts > rows:
        raise ValueError(f"cannot cut {rows} sequences into {parts} micro-batches")
    cuts = [rows * i // parts for i in range(parts + 1)]
    return [range(cuts[i], cuts[i + 1]) for i in range(parts)]


def split_layer_groups(layers: int, groups: int) -> list[range]:
    """The layers cut into ``groups`` contiguous groups whose sizes differ by at most one
    (the larger ones first: the last group also runs the LM head)."""
    if groups < 1 or groups > layers:
        raise ValueError(f"cannot cut {layers} layers into {groups} groups")
    sizes = [layers // groups + (1 if i < layers % groups else 0) for i in range(groups)]
    out, start = [], 0
    for n in sizes:
        out.append(range(start, start + n))
        start += n
    return out


@dataclasses.dataclass
class DecodeResult:
    tokens: np.ndarray  # int64 [len(indices), new_tokens]: the prefill's argmax, then one per step
    indices: tuple[int, ...]  # each row's prompt index as given
    errors: list[RequestError]  # the refused prompts, with why
    steps: int  # decode steps run (new_tokens - 1: the first token comes from the prefill)
    stats: dict[str, Any]


class _MicroBatch:
    """One micro-batch: its rows of the cache, its state (static) and its activations
    (static, or a block per step), as tensor views named after their regions."""

    def __init__(self, rows: range, cache: PagedKVCache):
        self.rows = rows
        self.page_table = cache.page_table[rows.start:rows.stop]
        self.seq_lens = cache.seq_lens[rows.start:rows.stop]
        self.block: int | None = None  # the activations' block while it is a per-step one

    def bind(self, regions: list[Region], arena: Any) -> None:
        import torch

        dtypes = {"int32": torch.int32, "int64": torch.int64, "uint8": torch.uint8}
        for r in regions:
            dt = dtypes.get(r.dtype) or getattr(torch, r.dtype)
            setattr(self, r.name, arena[r.offset:r.offset + r.nbytes].view(dt).view(r.shape))


class Decoder:
    def __init__(self, stack: DecoderStack, *, pool: Any, page_tokens: int = 64, graph: bool = True,
                 steps_per_graph: int = 8, layer_groups: int = 1, scratch: str = "static"):
        """``stack``: a whole :class:`~.decoder.DecoderStack` with ``kernels="fullpipe"`` on
        a GPU. ``pool``: the :class:`~fullpipe.cuda.pool.DevicePool` the cache's pages and
        the step buffers come from. See the module's docstring for the rest."""
        if stack.kernels != "fullpipe" or stack.device.type != "cuda":
            raise ValueError("Decoder needs a DecoderStack with kernels='fullpipe' on a GPU "
                             "(the PyTorch peers are in models.torch_decode)")
        if not (stack.holds_embedding and stack.holds_head):
            raise ValueError("Decoder needs the whole stack (not a slice of its layers)")
        if scratch not in SCRATCH:
            raise ValueError(f"scratch must be one of {', '.join(SCRATCH)}, got {scratch!r}")
        if graph and scratch != "static":
            raise ValueError(f"scratch={scratch!r} allocates every step: it needs graph=False")
        for name, value in (("steps_per_graph", steps_per_graph), ("layer_groups", layer_groups)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        from ..kernels.decode_attention import group_build

        group_build(stack.config.heads, stack.config.kv_heads)  # a ValueError now, not at the first step
        self.groups = split_layer_groups(stack.config.layers, layer_groups)
        self.stack, self.config, self.pool = stack, stack.config, pool
        self.page_tokens, self.graph, self.steps_per_graph = page_tokens, graph, steps_per_graph
        self.scratch = scratch

    # ------------------------------------------------------------------ the whole decode
    def generate(self, prompts: Sequence[Any], new_tokens: int, *, stream: Any = None,
                 forced: Any = None) -> DecodeResult:
        """Prefill ``prompts`` (host arrays of token ids; the refused ones come back in
        ``errors``) into a paged cache, then ``new_tokens - 1`` greedy steps. ``forced``:
        an int array ``[valid prompts, new_tokens - 1]``, the token each sequence takes in
        at each step instead of the last argmax (teacher forcing, to compare logits with a
        peer); ``result.stats["logits"]`` then holds every step's logits. Waits for the
        GPU at the end."""
        session = self.start(prompts, new_tokens, stream=stream, keep_logits=forced is not None)
        try:
            if forced is not None:
                session.force(forced)
            session.run()
            return session.finish()
        finally:
            session.close()

    def start(self, prompts: Sequence[Any], new_tokens: int, *, stream: Any = None,
              keep_logits: bool = False) -> "DecodeSession":
        """Check and prefill ``prompts``; the returned session runs the steps."""
        if isinstance(new_tokens, bool) or not isinstance(new_tokens, int) or new_tokens < 1:
            raise ValueError(f"new_tokens must be an int >= 1, got {new_tokens!r}")
        valid, errors = check_requests(prompts, self.config)
        kept = []
        for r in valid:  # a prompt whose generation would pass the context is refused up front
            if len(r.tokens) + new_tokens > self.config.max_context:
                errors.append(RequestError(r.index, f"{len(r.tokens)} prompt tokens + {new_tokens} new tokens "
                                                    f"pass max_context ({self.config.max_context})"))
            else:
                kept.append(r)
        errors.sort(key=lambda e: e.index)
        if not kept:
            from .requests import NoValidRequests

            raise NoValidRequests(errors)
        if len(kept) < len(self.groups):
            raise ValueError(f"{len(kept)} valid prompts cannot fill {len(self.groups)} layer groups' micro-batches")
        return DecodeSession(self, pack(kept), errors, new_tokens, stream, keep_logits)


class DecodeSession:
    """One batch's decode: its cache, its buffers, its graph. Made by :meth:`Decoder.start`."""

    def __init__(self, dec: Decoder, batch: Any, errors: list[RequestError], new_tokens: int, stream: Any,
                 keep_logits: bool):
        import torch

        from ..cuda.device import ensure_current
        from ..kernels.decode_attention import decode_workspace_bytes, plan_decode

        self.dec, self.batch, self.errors, self.new_tokens = dec, batch, errors, new_tokens
        stack, c = dec.stack, dec.config
        self.device = stack.device
        self.sequences = batch.requests
        self.lengths = batch.lengths.astype(np.int64)  # cached tokens per sequence, as the host knows them
        self.steps_done = 0  # steps enqueued
        self._forced: np.ndarray | None = None
        self._graph: Any = None
        self._blocks: list[int] = []  # static blocks from the pool
        self._closed = False
        self._host_step = 0  # steps enqueued from Python (the row of ``logits`` a forced step fills)
        ensure_current(self.device.index or 0, force=True)
        if stream is None:  # a stream of its own: a CUDA graph cannot be captured on the default stream
            stream = torch.cuda.Stream(self.device)
            stream.wait_stream(torch.cuda.current_stream(self.device))
        torch_s0, _ = stack._streams(stream)
        if dec.graph and int(torch_s0.cuda_stream) == 0:
            raise ValueError("graph=True needs a stream other than the legacy default stream (a CUDA graph cannot "
                             "be captured there): give stream=None for a stream of the decode's own")
        self.streams = [torch_s0] + [torch.cuda.Stream(self.device) for _ in dec.groups[1:]]
        self.core_streams = [stack._streams(s)[1] for s in self.streams]
        self.events = [[torch.cuda.Event() for _ in dec.groups] for _ in dec.groups]  # [micro-batch][group]
        self.cache = PagedKVCache(c, self.sequences, pool=dec.pool, page_tokens=dec.page_tokens, device=self.device,
                                  capacity=int(self.lengths.max()) + new_tokens)
        parts = split_rows(self.sequences, len(dec.groups))
        rows = max(len(r) for r in parts)
        self.split_tokens, self.max_splits = plan_decode(rows, c.heads, c.kv_heads, self.cache.capacity,
                                                         dec.page_tokens, _sm_count(self.device))
        self.state_regions, self.state_bytes = state_buffers(c, rows)
        self.step_regions, self.step_bytes = step_buffers(
            c, rows, decode_workspace_bytes(rows, c.heads, c.head_dim, self.max_splits))
        self.generated = torch.zeros((self.sequences, new_tokens), dtype=torch.int64, device=self.device)
        self.logits = torch.empty((new_tokens - 1, self.sequences, c.vocab), dtype=getattr(torch, c.dtype),
                                  device=self.device) if keep_logits else None
        self.step_index = torch.zeros(1, dtype=torch.int64, device=self.device)
        self.micro = [_MicroBatch(r, self.cache) for r in parts]
        with torch.cuda.stream(torch_s0):
            try:
                self._prefill()
            except BaseException:
                self.close()
                raise
        self.pool_allocations_after_prefill = dec.pool.stats().allocations_total

    def _block(self, nbytes: int) -> Any:
        """A uint8 tensor over a block from the pool, kept until :meth:`close`."""
        from ..cuda.interop import as_torch
        from ..cuda.memory import DeviceArray

        ptr = self.dec.pool.allocate_ptr(nbytes, self.core_streams[0])
        self._blocks.append(ptr)
        return as_torch(DeviceArray(ptr, (nbytes,), np.uint8, device_index=self.device.index or 0))

    # ------------------------------------------------------------------ prefill
    def _prefill(self) -> None:
        import torch

        from .kv_cache import upload

        dec, s0 = self.dec, self.core_streams[0]
        self.cache.reserve(self.lengths + 1, s0)
        logits, _ = dec.stack.prefill_packed(self.batch, stream=self.streams[0], kv_cache=self.cache)
        first = torch.argmax(logits, dim=-1)
        self.generated[:, 0] = first
        self.step_index.fill_(1)
        for mb in self.micro:
            lo, hi = mb.rows.start, mb.rows.stop
            mb.bind(self.state_regions, self._block(self.state_bytes))
            if dec.scratch == "static":
                mb.bind(self.step_regions, self._block(self.step_bytes))
            n = hi - lo
            mb.tokens[:n].copy_(first[lo:hi])
            upload(mb.positions[:n], self.lengths[lo:hi].astype(np.int32))
            upload(mb.seq_ids[:n], np.arange(n, dtype=np.int32))
            for name in ("tokens", "positions", "seq_ids"):  # a smaller micro-batch uses the first rows
                setattr(mb, name, getattr(mb, name)[:n])
        self.cache.set_lengths(self.lengths + 1, s0)
        for s in self.streams[1:]:
            s.wait_stream(self.streams[0])

    # ------------------------------------------------------------------ steps
    def force(self, tokens: Any) -> None:
        """Feed these tokens (``[sequences, new_tokens - 1]``) at the steps instead of the
        argmax (teacher forcing; the steps then run one by one, without the graph)."""
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.shape != (self.sequences, self.new_tokens - 1):
            raise ValueError(f"forced tokens must be [{self.sequences}, {self.new_tokens - 1}], got {tokens.shape}")
        self._forced = tokens

    def run(self, steps: int | None = None) -> None:
        """Enqueue ``steps`` more steps (default: the rest); never waits for the GPU."""
        left = self.new_tokens - 1 - self.steps_done
        steps = left if steps is None else min(int(steps), left)
        dec = self.dec
        eager_only = self._forced is not None or self.logits is not None
        k = dec.steps_per_graph
        while steps > 0:
            graphed = dec.graph and not eager_only and steps >= k and (self._graph is not None or steps > k)
            n = k if graphed and self._graph is not None else 1
            # A graph is captured after one eager step (cuBLAS and PyTorch's allocator
            # want one run outside a capture; it is a real step, not a throwaway).
            self.cache.reserve(self.lengths + n, self.core_streams[0])
            if self._forced is not None:
                self._feed(self._forced[:, self.steps_done])
            if graphed and self._graph is not None:
                self._replay()
            else:
                self._enqueue_steps(1)
                if graphed:
                    self._capture()
            self.lengths += n
            self.steps_done += n
            steps -= n

    def _feed(self, tokens: np.ndarray) -> None:
        import torch

        from .kv_cache import upload

        with torch.cuda.stream(self.streams[0]):
            for mb in self.micro:
                upload(mb.tokens, tokens[mb.rows.start:mb.rows.stop])

    def _capture(self) -> None:
        import torch

        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=self.streams[0]):
            self._enqueue_steps(self.dec.steps_per_graph)
        self._graph = g

    def _replay(self) -> None:
        import torch

        with torch.cuda.stream(self.streams[0]):
            self._graph.replay()

    def _enqueue_steps(self, steps: int) -> None:
        """Enqueue ``steps`` steps of every micro-batch, layer group by layer group, each
        group on its own stream (the order is in the module's docstring)."""
        import torch

        s0, last = self.streams[0], len(self.dec.groups) - 1
        for s in self.streams[1:]:
            s.wait_stream(s0)  # fork: after everything enqueued before (a capture needs it too)
        recorded = set()  # events recorded in this call; earlier ones are behind the fork already
        for _ in range(steps):
            for m, mb in enumerate(self.micro):
                for g, layers in enumerate(self.dec.groups):
                    stream = self.streams[g]
                    before = (m, g - 1) if g else (m, last)
                    if before in recorded:
                        stream.wait_event(self.events[before[0]][before[1]])
                    with torch.cuda.stream(stream):
                        if g == 0 and self.dec.scratch != "static":
                            self._take_step_block(mb)
                        self._enqueue_group(mb, g, layers, self.core_streams[g])
                        if g == last and self.dec.scratch != "static":
                            self._give_step_block(mb, g)
                    self.events[m][g].record(stream)
                    recorded.add((m, g))
            self._host_step += 1
        for s in self.streams[1:]:
            s0.wait_stream(s)  # join

    def _take_step_block(self, mb: _MicroBatch) -> None:
        """This step's activations for ``mb`` (``scratch="pool"``: stream-ordered on the
        first group's stream; ``"cudaMalloc"``: ``cuMemAlloc``)."""
        from ..cuda import driver as drv
        from ..cuda.interop import as_torch
        from ..cuda.memory import DeviceArray

        n = self.step_bytes
        ptr = self.dec.pool.allocate_ptr(n, self.core_streams[0]) if self.dec.scratch == "pool" \
            else int(drv.call("cuMemAlloc", n))
        mb.block = ptr
        mb.bind(self.step_regions, as_torch(DeviceArray(ptr, (n,), np.uint8, device_index=self.device.index or 0)))

    def _give_step_block(self, mb: _MicroBatch, g: int) -> None:
        """Free the step's activations after the last group's kernels: in stream order on
        its stream (pool), or ``cuMemFree``, which waits for the device first."""
        from ..cuda import driver as drv

        if self.dec.scratch == "pool":
            self.dec.pool.free_ptr(mb.block, self.core_streams[g])
        else:
            drv.call("cuMemFree", mb.block)
        mb.block = None

    def _enqueue_group(self, mb: _MicroBatch, g: int, layers: range, s: Any) -> None:
        import torch

        from ..kernels import elementwise as fused
        from ..kernels.decode_attention import decode_attention, kv_write

        dec, c, W, cache = self.dec, self.dec.config, self.dec.stack.weights, self.cache
        eps, hq, hkv, d = c.norm_eps, c.heads, c.kv_heads, c.head_dim
        n = len(mb.rows)
        x, h, qkv, q, k, v = mb.x[:n], mb.h[:n], mb.qkv[:n], mb.q[:n], mb.k[:n], mb.v[:n]
        attn, proj, gate_up, act, logits = mb.attn[:n], mb.proj[:n], mb.gate_up[:n], mb.act[:n], mb.logits[:n]
        if g == 0:
            torch.index_select(W["embedding"], 0, mb.tokens, out=x)
            fused.rms_norm(x, W["layers.0.attn_norm"], eps, h, s)
        for i in layers:
            p = f"layers.{i}."
            # cuBLAS: a step has one row per sequence; fullpipe's skinny GEMM (what
            # gemm(variant="hopper") takes for few rows) reads 0.89-1.09x torch.matmul on
            # these four projections at 8 rows with the weights in HBM: about equal in sum
            # (session 27, p181/p182), not worth a change to the step's graph
            torch.matmul(h, W[p + "wqkv"], out=qkv)
            fused.rope_qkv(qkv, mb.positions, q, k, v, hq, hkv, d, c.rope_base, s)
            kv_write(k, v, mb.page_table, mb.seq_ids, mb.positions, i, c.layers, cache.page_tokens, stream=s)
            decode_attention(q, attn.view(n, hq, d), mb.page_table, mb.seq_lens, i, c.layers, cache.page_tokens,
                             kv_heads=hkv, split_tokens=self.split_tokens, partial=mb.workspace, stream=s)
            torch.matmul(attn, W[p + "wo"], out=proj)
            fused.residual_rms_norm(x, proj, W[p + "ffn_norm"], eps, h, s)
            torch.matmul(h, W[p + "w_gate_up"], out=gate_up)
            fused.swiglu(gate_up, act, s)
            torch.matmul(act, W[p + "w_down"], out=proj)
            after = W[f"layers.{i + 1}.attn_norm"] if i + 1 < c.layers else W["final_norm"]
            fused.residual_rms_norm(x, proj, after, eps, h, s)  # after the last layer: the final norm
        if g == len(dec.groups) - 1:
            torch.matmul(h, W["lm_head"], out=logits)
            if self.logits is not None:  # eager steps only (teacher forcing)
                self.logits[self._host_step, mb.rows.start:mb.rows.stop].copy_(logits)
            torch.argmax(logits, dim=-1, out=mb.tokens)
            self.generated[mb.rows.start:mb.rows.stop].index_copy_(1, self.step_index, mb.tokens[:, None])
            if mb.rows.stop == self.sequences:
                self.step_index.add_(1)  # after the last micro-batch: the last group's stream runs them in order
            mb.positions.add_(1)
            mb.seq_lens.add_(1)

    # ------------------------------------------------------------------ results
    def finish(self) -> DecodeResult:
        """Wait for the GPU; the generated tokens and the stats."""
        for s in self.streams:
            s.synchronize()
        stats = {
            "pages": self.cache.pages_held,
            "page_bytes": self.cache.page_bytes,
            "cache_bytes": self.cache.held_bytes,
            "cache_preallocated_bytes": self.cache.preallocated_bytes,
            "pool_allocations_in_steps": self.dec.pool.stats().allocations_total - self.pool_allocations_after_prefill,
            "pages_allocated": self.cache.pages_allocated,
            "split_tokens": self.split_tokens,
            "max_splits": self.max_splits,
            "graphed": self._graph is not None,
        }
        if self.logits is not None:
            stats["logits"] = self.logits
        return DecodeResult(self.generated.cpu().numpy(), self.batch.indices, self.errors, self.steps_done, stats)

    def close(self) -> None:
        """Give every page and block back, in stream order after all the steps."""
        if self._closed:
            return
        self._closed = True
        s0 = self.streams[0]
        for s in self.streams[1:]:
            s0.wait_stream(s)
        core = self.core_streams[0]
        for mb in self.micro:
            if mb.block is not None:
                self._give_step_block(mb, 0)
        for ptr in self._blocks:
            self.dec.pool.free_ptr(ptr, core)
        self._blocks = []
        self.cache.release(core)
        self._graph = None


def _sm_count(device: Any) -> int:
    import torch

    return torch.cuda.get_device_properties(device).multi_processor_count
