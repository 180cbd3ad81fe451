"""The decoder stack built from fullpipe's kernels: prefill of a packed batch.

    stack = DecoderStack(config, init_weights(config, seed=0, device="cuda"), pool=pool)
    result = stack.prefill(requests, stream=s)     # result.logits [valid requests, vocab]

Per layer, on one stream: RMSNorm -> fused Q K V projection -> RoPE -> flash attention
(varlen, causal, grouped K/V heads) -> W_o -> residual -> RMSNorm -> fused gate/up
projection -> SwiGLU -> W_down -> residual; then the final RMSNorm of each request's
last token and the LM head.

What runs where (``kernels=``):

- ``"fullpipe"``: attention is :func:`fullpipe.kernels.attention` (its ``auto`` backend:
  the Hopper kernel on sm_90a where it was measured faster, else mma.sync); each
  projection is :func:`fullpipe.kernels.gemm_hopper` (persistent rung) where its
  constraints hold (sm_90a, bf16/fp16, K and N multiples of 8), else ``torch.matmul``.
  The choice is made once per projection by :func:`choose_matmul` and kept in
  :attr:`DecoderStack.matmul_choices` with its reason.
- ``"torch"``: ``torch.matmul`` everywhere and PyTorch's SDPA per request over the
  packed batch (the "level 1 only" row of the experiment; also runs on the CPU).

With ``kernels="fullpipe"``, RMSNorm (fused with the residual add before it), RoPE of Q and
K (with V's copy, from the fused projection) and SwiGLU are fullpipe's fused kernels
(:mod:`fullpipe.kernels.elementwise`, one launch each); with ``kernels="torch"`` they are
the PyTorch functions of :mod:`.elementwise` (also the reference's). The embedding lookup
is PyTorch in both, on the same stream.

Memory: every buffer of the batch (:mod:`.memory`, sized by the batch's real token
count) is ONE allocation, from the fullpipe :class:`~fullpipe.cuda.pool.DevicePool`
given as ``pool`` (stream-ordered: ``cuMemAllocFromPoolAsync`` on the prefill's stream,
``cuMemFreeAsync`` after its last use on that stream), or from PyTorch's caching
allocator when ``pool`` is None. PyTorch's elementwise temporaries and the returned
logits come from PyTorch's caching allocator, on the same stream. An exception in the
middle of the stack frees the scratch (in stream order) before it propagates.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from .config import StackConfig
from .elementwise import apply_rope, rms_norm, rope_tables, swiglu
from .kv_cache import upload
from .memory import ScratchPlan, scratch_plan
from .requests import PackedBatch, RequestError, check_and_pack

KERNELS = ("fullpipe", "torch")
GEMM_DTYPES = ("bfloat16", "float16")
PROJECTIONS = ("wqkv", "wo", "w_gate_up", "w_down", "lm_head")


@dataclasses.dataclass(frozen=True)
class MatmulChoice:
    backend: str  # "hopper" (fullpipe.kernels.gemm_hopper) or "torch" (torch.matmul)
    reason: str


def choose_matmul(kernels: str, arch: str | None, dtype: str, k: int, n: int) -> MatmulChoice:
    """Which kernel computes an ``[M, k] @ [k, n]`` projection (any M)."""
    if kernels == "torch":
        return MatmulChoice("torch", "kernels='torch'")
    if arch is None:
        return MatmulChoice("torch", "no GPU: fullpipe's GEMM runs on sm_90a only")
    if arch != "sm_90a":
        return MatmulChoice("torch", f"fullpipe's Hopper GEMM needs sm_90a, this GPU is {arch}")
    if dtype not in GEMM_DTYPES:
        return MatmulChoice("torch", f"fullpipe's Hopper GEMM takes bfloat16/float16, not {dtype}")
    if k % 8 or n % 8:
        return MatmulChoice("torch", f"fullpipe's Hopper GEMM needs K and N multiples of 8, got K={k}, N={n}")
    return MatmulChoice("hopper", "gemm(variant='hopper'): the persistent rung, the skinny kernel for few "
                                  "rows; row-major [M, K] @ [K, N]")


@dataclasses.dataclass
class PrefillResult:
    logits: Any  # [len(indices), vocab], the stack's dtype, one row per valid request
    indices: tuple[int, ...]  # each row's request index in the batch as given
    errors: list[RequestError]  # the refused requests, with why
    scratch: ScratchPlan  # the device scratch this batch took


def slice_weight_names(config: StackConfig, layers: range) -> list[str]:
    """The weights a slice of the stack needs: its layers', the embedding if it starts at
    layer 0, the final norm and the LM head if it ends at the last layer."""
    names = []
    for name in config.weight_shapes():
        if name.startswith("layers."):
            keep = int(name.split(".")[1]) in layers
        elif name == "embedding":
            keep = layers.start == 0
        else:  # final_norm, lm_head
            keep = layers.stop == config.layers
        if keep:
            names.append(name)
    return names


@dataclasses.dataclass
class SliceRun:
    """One packed batch enqueued on a slice of the stack (:meth:`DecoderStack.run_slice`).
    Its scratch stays reserved until :meth:`DecoderStack.release`."""

    plan: ScratchPlan
    arena: Any  # torch uint8 tensor over the scratch
    buffer: Any  # the pool's buffer behind ``arena``; None when PyTorch's allocator holds it
    logits: Any  # [batch.requests, vocab] from the slice holding the LM head, else None
    stream: Any  # the cuda.core stream it was enqueued on (None on the CPU)

    def view(self, name: str, dtype: Any) -> Any:
        r = self.plan.region(name)
        return self.arena[r.offset:r.offset + r.nbytes].view(dtype).view(r.shape)


class DecoderStack:
    def __init__(self, config: StackConfig, weights: dict[str, Any], *, kernels: str = "fullpipe",
                 pool: Any = None, layers: range | None = None):
        """``layers``: the slice of the stack this object runs (default: all of it). A
        slice that starts at layer 0 holds the embedding; one that ends at the last layer
        holds the final norm and the LM head; ``weights`` need only the slice's tensors
        (the pipeline-parallel stages of :mod:`.stages` are such slices)."""
        import torch

        if kernels not in KERNELS:
            raise ValueError(f"kernels must be one of {', '.join(KERNELS)}, got {kernels!r}")
        layers = range(config.layers) if layers is None else layers
        if not isinstance(layers, range) or layers.step != 1 or not layers or layers.start < 0 \
                or layers.stop > config.layers:
            raise ValueError(f"layers must be a non-empty range(a, b) with 0 <= a < b <= {config.layers}, "
                             f"got {layers!r}")
        self.layers = layers
        self.holds_embedding = layers.start == 0
        self.holds_head = layers.stop == config.layers
        needed = set(slice_weight_names(config, layers))
        shapes = {name: shape for name, shape in config.weight_shapes().items() if name in needed}
        missing = sorted(set(shapes) - set(weights))
        if missing:
            raise ValueError(f"weights lack {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}")
        dtype = getattr(torch, config.dtype)
        device = weights[next(iter(shapes))].device
        for name, shape in shapes.items():
            w = weights[name]
            if tuple(w.shape) != shape or w.dtype != dtype or w.device != device or not w.is_contiguous():
                raise ValueError(f"weight {name} must be a contiguous {shape} {config.dtype} tensor on {device}, "
                                 f"got {tuple(w.shape)} {w.dtype} on {w.device}")
        if device.type != "cuda" and (kernels == "fullpipe" or pool is not None):
            raise ValueError(f"weights are on {device}: kernels='fullpipe' and a pool need them on a GPU "
                             "(kernels='torch', pool=None runs on the CPU)")
        self.config, self.kernels, self.pool = config, kernels, pool
        self.weights = {name: weights[name] for name in shapes}
        self.device = device
        self.arch = self._arch() if device.type == "cuda" else None
        self.matmul_choices: dict[str, MatmulChoice] = {}
        for name in PROJECTIONS:
            key = name if name == "lm_head" else f"layers.{layers.start}.{name}"
            if key in shapes:
                k, n = shapes[key]
                self.matmul_choices[name] = choose_matmul(kernels, self.arch, config.dtype, k, n)
        self.attention_backend = "fullpipe.kernels.attention(backend='auto')" if kernels == "fullpipe" \
            else "torch scaled_dot_product_attention per request"

    def _arch(self) -> str:
        from ..cuda import compiler
        from ..cuda.device import Device

        return compiler.default_arch(Device(self.device.index or 0))

    # ------------------------------------------------------------------ prefill
    def prefill(self, requests: Sequence[Any], *, stream: Any = None) -> PrefillResult:
        """Check the requests (host arrays of token ids; the refused ones come back in
        ``errors``), pack the valid ones and run the stack on them, enqueued on
        ``stream`` (a torch.cuda.Stream, a cuda.core Stream or anything with
        ``__cuda_stream__``; default torch's current stream). The logits are ready when
        ``stream`` has reached this point. The host never waits for the GPU: the small
        index arrays (token ids, positions, offsets) go up from pinned memory on
        ``stream``."""
        batch, errors = check_and_pack(requests, self.config)
        logits, plan = self.prefill_packed(batch, stream=stream)
        return PrefillResult(logits, batch.indices, errors, plan)

    def prefill_packed(self, batch: PackedBatch, *, stream: Any = None, out: Any = None,
                       kv_cache: Any = None) -> tuple[Any, ScratchPlan]:
        """(logits, scratch plan) of an already checked and packed batch, through every
        layer (a stack built on a slice of the layers refuses). ``out``: the
        logits tensor to write (``[batch.requests, vocab]``, the stack's dtype, on its
        device); a new one from PyTorch's allocator when None. ``kv_cache``: a
        :class:`~.kv_cache.PagedKVCache` with a row per request of the batch and pages for
        every prompt token: each layer's K and V (after RoPE) are written into it
        (``kernels="fullpipe"`` only), for the decode that follows."""
        if not (self.holds_embedding and self.holds_head):
            raise ValueError(f"this stack runs layers {self.layers.start}..{self.layers.stop - 1} of "
                             f"{self.config.layers}: a prefill needs all of them (stages use run_slice)")
        run = self.run_slice(batch, stream=stream, out=out, kv_cache=kv_cache)
        self.release(run)
        return run.logits, run.plan

    def run_slice(self, batch: PackedBatch, *, stream: Any = None, receive: Any = None, out: Any = None,
                  scratch_bytes: int = 0, kv_cache: Any = None, tokens: Any = None) -> SliceRun:
        """Enqueue this slice's layers on ``batch`` (on ``stream``, as :meth:`prefill`) and
        return its :class:`SliceRun`, whose scratch stays reserved until :meth:`release`.

        A slice that holds the embedding starts from the token ids. Any other slice gets
        its input activations from ``receive(x, stream)``: called on the host after the
        scratch exists and before the first layer is enqueued, with ``x`` (the scratch's
        ``[tokens, width]`` residual stream, a torch tensor) and the cuda.core stream; it
        must enqueue on that stream whatever fills ``x`` (e.g. a wait for a peer copy).

        ``scratch_bytes``: take at least this much scratch (for callers that give every
        micro-batch the same size, so that the pool hands the same block back each time).
        ``kv_cache``: as :meth:`prefill_packed`. ``tokens``: the packed token ids already on
        the device (an int32 tensor ``[batch.total_tokens]``, e.g. copied up by the
        executor), instead of uploading ``batch.tokens``."""
        import torch

        if tokens is not None:
            if not self.holds_embedding:
                raise ValueError("tokens= is for the slice that holds the embedding")
            if tuple(tokens.shape) != (batch.total_tokens,) or tokens.dtype != torch.int32 \
                    or tokens.device != self.device:
                raise ValueError(f"tokens must be an int32 ({batch.total_tokens},) tensor on {self.device}, "
                                 f"got {tuple(tokens.shape)} {tokens.dtype} on {tokens.device}")
        if kv_cache is not None:
            if self.kernels != "fullpipe":
                raise ValueError("kv_cache= needs kernels='fullpipe' (the PyTorch peers keep their own cache)")
            if kv_cache.sequences != batch.requests:
                raise ValueError(f"kv_cache has {kv_cache.sequences} rows for a batch of {batch.requests} requests")
            short = [r for r, n in enumerate(batch.lengths) if kv_cache.slots(r) < n]
            if short:
                raise ValueError(f"kv_cache: request {short[0]} has {int(batch.lengths[short[0]])} tokens but "
                                 f"pages for {kv_cache.slots(short[0])} (reserve them first)")

        if not self.holds_embedding and receive is None:
            raise ValueError(f"this stack starts at layer {self.layers.start}: give receive= to fill its input")
        if out is not None:
            if not self.holds_head:
                raise ValueError("out= is for the slice that holds the LM head")
            want = (batch.requests, self.config.vocab)
            if tuple(out.shape) != want or out.dtype != getattr(torch, self.config.dtype) \
                    or out.device != self.device or not out.is_contiguous():
                raise ValueError(f"out must be a contiguous {want} {self.config.dtype} tensor on {self.device}, "
                                 f"got {tuple(out.shape)} {out.dtype} on {out.device}")
        plan = scratch_plan(self.config, batch.total_tokens, batch.requests)
        nbytes = max(plan.nbytes, int(scratch_bytes))
        if self.device.type != "cuda":
            arena = torch.empty(plan.nbytes, dtype=torch.uint8, device=self.device)
            run = SliceRun(plan, arena, None, None, None)
            run.logits = self._run(batch, run, receive, out, None, tokens)
            return run
        from ..cuda.device import ensure_current

        torch_s, core_s = self._streams(stream)
        with torch.cuda.device(self.device), torch.cuda.stream(torch_s):
            # PyTorch may have switched this thread's device; fullpipe's launches ask
            # for the device they need, so its record must be true.
            ensure_current(self.device.index or 0, force=True)
            if self.pool is None:
                run = SliceRun(plan, torch.empty(nbytes, dtype=torch.uint8, device=self.device), None, None,
                               core_s)
            else:
                from ..cuda.interop import as_torch
                from ..cuda.memory import DeviceArray

                buf = self.pool.allocate(nbytes, core_s)
                arena = as_torch(DeviceArray(int(buf.handle), (nbytes,), np.uint8, owner=buf,
                                             device_index=self.device.index or 0))
                run = SliceRun(plan, arena, buf, None, core_s)
            try:
                run.logits = self._run(batch, run, receive, out, kv_cache, tokens)
            except BaseException:
                self.release(run)
                raise
        return run

    def release(self, run: SliceRun, stream: Any = None) -> None:
        """Give ``run``'s scratch back, in stream order on ``stream`` (default: the stream
        it ran on; give the stream of its last use when another stream read it after)."""
        if run.buffer is not None:
            from ..cuda.streams import as_core_stream

            self.pool.free(run.buffer, run.stream if stream is None else as_core_stream(stream))
            run.buffer = None
        elif stream is not None and run.stream is not None:
            from ..cuda.interop import torch_stream
            from ..cuda.streams import as_core_stream

            # PyTorch's allocator: keep the block from reuse until that stream's work is done.
            run.arena.record_stream(torch_stream(as_core_stream(stream), self.device.index or 0))

    def _streams(self, stream: Any) -> tuple[Any, Any]:
        """(torch stream, cuda.core stream) for ``stream``."""
        import torch
        from cuda.core import Stream

        from ..cuda.interop import torch_stream
        from ..cuda.streams import as_core_stream

        if stream is None:
            stream = torch.cuda.current_stream(self.device)
        if isinstance(stream, torch.cuda.Stream):
            return stream, Stream.from_handle(int(stream.cuda_stream))
        core = as_core_stream(stream)
        return torch_stream(core, self.device.index or 0), core

    def _run(self, batch: PackedBatch, run: SliceRun, receive: Any, out: Any, kv_cache: Any, given: Any) -> Any:
        import torch

        c, W, core_s = self.config, self.weights, run.stream
        T, R = batch.total_tokens, batch.requests
        hq, hkv, d = c.heads, c.kv_heads, c.head_dim
        dtype = getattr(torch, c.dtype)

        def view(name: str) -> Any:
            return run.view(name, {"int32": torch.int32, "int64": torch.int64}.get(run.plan.region(name).dtype, dtype))

        positions, cu = view("positions"), view("cu_seqlens")
        upload(positions, batch.positions)
        upload(cu, batch.cu_seqlens)
        x, h, qkv, proj = view("x"), view("h"), view("qkv"), view("proj")
        q, k, v, attn = view("q"), view("k"), view("v"), view("attn")
        gate_up, act = view("gate_up"), view("act")

        if self.holds_embedding:
            if given is None:
                given = view("tokens")
                upload(given, batch.tokens)
            torch.index_select(W["embedding"], 0, given, out=x)
        else:
            receive(x, core_s)
        if self.kernels == "fullpipe":
            # The fused kernels of kernels/elementwise.py, one launch each; each residual
            # add is fused with the norm that reads its result (the next layer's
            # attn_norm too, so that norm is not launched again at the top of the layer).
            from ..kernels import elementwise as fused

            if kv_cache is not None:
                from ..kernels.decode_attention import kv_write

                seq_ids = torch.empty(T, dtype=torch.int32, device=self.device)  # each token's request
                upload(seq_ids, np.repeat(np.arange(R, dtype=np.int32), batch.lengths))
            eps = c.norm_eps
            for i in self.layers:
                p = f"layers.{i}."
                if i == self.layers.start:
                    fused.rms_norm(x, W[p + "attn_norm"], eps, h, core_s)
                self._matmul("wqkv", h, W[p + "wqkv"], qkv, core_s)
                fused.rope_qkv(qkv, positions, q, k, v, hq, hkv, d, c.rope_base, core_s)
                if kv_cache is not None:
                    kv_write(k, v, kv_cache.page_table, seq_ids, positions, i, c.layers, kv_cache.page_tokens,
                             stream=core_s)
                self._attention(q, k, v, attn.view(T, hq, d), batch, cu, core_s)
                self._matmul("wo", attn, W[p + "wo"], proj, core_s)
                fused.residual_rms_norm(x, proj, W[p + "ffn_norm"], eps, h, core_s)
                self._matmul("w_gate_up", h, W[p + "w_gate_up"], gate_up, core_s)
                fused.swiglu(gate_up, act, core_s)
                self._matmul("w_down", act, W[p + "w_down"], proj, core_s)
                if i + 1 < self.layers.stop:
                    fused.residual_rms_norm(x, proj, W[f"layers.{i + 1}.attn_norm"], eps, h, core_s)
                else:
                    x.add_(proj)
        else:
            cos, sin = rope_tables(positions, d, c.rope_base)
            for i in self.layers:
                p = f"layers.{i}."
                rms_norm(x, W[p + "attn_norm"], c.norm_eps, out=h)
                self._matmul("wqkv", h, W[p + "wqkv"], qkv, core_s)
                apply_rope(qkv[:, :hq * d].view(T, hq, d), cos, sin, out=q)
                apply_rope(qkv[:, hq * d:(hq + hkv) * d].view(T, hkv, d), cos, sin, out=k)
                v.copy_(qkv[:, (hq + hkv) * d:].view(T, hkv, d))
                self._attention(q, k, v, attn.view(T, hq, d), batch, cu, core_s)
                self._matmul("wo", attn, W[p + "wo"], proj, core_s)
                x.add_(proj)
                rms_norm(x, W[p + "ffn_norm"], c.norm_eps, out=h)
                self._matmul("w_gate_up", h, W[p + "w_gate_up"], gate_up, core_s)
                swiglu(gate_up, out=act)
                self._matmul("w_down", act, W[p + "w_down"], proj, core_s)
                x.add_(proj)
        if not self.holds_head:
            return None
        last = view("last_token")
        upload(last, batch.last_token)
        last_hidden = view("last_hidden")
        if self.kernels == "fullpipe":
            from ..kernels.elementwise import rms_norm as fused_rms_norm

            fused_rms_norm(torch.index_select(x, 0, last), W["final_norm"], c.norm_eps, last_hidden, core_s)
        else:
            rms_norm(torch.index_select(x, 0, last), W["final_norm"], c.norm_eps, out=last_hidden)
        logits = out if out is not None else torch.empty((R, c.vocab), dtype=dtype, device=self.device)
        self._matmul("lm_head", last_hidden, W["lm_head"], logits, core_s)
        return logits

    def _matmul(self, name: str, a: Any, w: Any, out: Any, core_s: Any) -> None:
        import torch

        if self.matmul_choices[name].backend == "hopper":
            from ..kernels.gemm import gemm

            gemm(a, w, variant="hopper", out=out, stream=core_s)
        else:
            torch.matmul(a, w, out=out)

    def _attention(self, q: Any, k: Any, v: Any, out: Any, batch: PackedBatch, cu: Any, core_s: Any) -> None:
        import torch

        if self.kernels == "fullpipe":
            from ..kernels.flash_attention import attention

            attention(q, k, v, causal=True, cu_seqlens=cu, max_seqlen=batch.max_seqlen, out=out, stream=core_s)
            return
        rep = self.config.heads // self.config.kv_heads
        for r in range(batch.requests):
            lo, hi = int(batch.cu_seqlens[r]), int(batch.cu_seqlens[r + 1])
            o = torch.nn.functional.scaled_dot_product_attention(
                q[lo:hi].transpose(0, 1), k[lo:hi].repeat_interleave(rep, dim=1).transpose(0, 1),
                v[lo:hi].repeat_interleave(rep, dim=1).transpose(0, 1), is_causal=True)
            out[lo:hi].copy_(o.transpose(0, 1))
