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

RMSNorm, RoPE, SwiGLU, the residual adds and the embedding lookup are PyTorch
(:mod:`.elementwise`), on the same stream.

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
    return MatmulChoice("hopper", "gemm_hopper(variant='persistent'), row-major [M, K] @ [K, N]")


@dataclasses.dataclass
class PrefillResult:
    logits: Any  # [len(indices), vocab], the stack's dtype, one row per valid request
    indices: tuple[int, ...]  # each row's request index in the batch as given
    errors: list[RequestError]  # the refused requests, with why
    scratch: ScratchPlan  # the device scratch this batch took


class DecoderStack:
    def __init__(self, config: StackConfig, weights: dict[str, Any], *, kernels: str = "fullpipe",
                 pool: Any = None):
        import torch

        if kernels not in KERNELS:
            raise ValueError(f"kernels must be one of {', '.join(KERNELS)}, got {kernels!r}")
        shapes = config.weight_shapes()
        missing = sorted(set(shapes) - set(weights))
        if missing:
            raise ValueError(f"weights lack {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}")
        dtype = getattr(torch, config.dtype)
        device = weights["embedding"].device
        for name, shape in shapes.items():
            w = weights[name]
            if tuple(w.shape) != shape or w.dtype != dtype or w.device != device or not w.is_contiguous():
                raise ValueError(f"weight {name} must be a contiguous {shape} {config.dtype} tensor on {device}, "
                                 f"got {tuple(w.shape)} {w.dtype} on {w.device}")
        if device.type != "cuda" and (kernels == "fullpipe" or pool is not None):
            raise ValueError(f"weights are on {device}: kernels='fullpipe' and a pool need them on a GPU "
                             "(kernels='torch', pool=None runs on the CPU)")
        self.config, self.weights, self.kernels, self.pool = config, weights, kernels, pool
        self.device = device
        self.arch = self._arch() if device.type == "cuda" else None
        self.matmul_choices: dict[str, MatmulChoice] = {}
        for name in PROJECTIONS:
            k, n = shapes[name if name == "lm_head" else f"layers.0.{name}"]
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
        ``stream`` has reached this point. The host waits once, for the stream's earlier
        work: PyTorch copies the small index arrays (token ids, positions, offsets) from
        pageable memory synchronously; everything after is enqueued without waiting."""
        batch, errors = check_and_pack(requests, self.config)
        logits, plan = self.prefill_packed(batch, stream=stream)
        return PrefillResult(logits, batch.indices, errors, plan)

    def prefill_packed(self, batch: PackedBatch, *, stream: Any = None, out: Any = None) -> tuple[Any, ScratchPlan]:
        """(logits, scratch plan) of an already checked and packed batch. ``out``: the
        logits tensor to write (``[batch.requests, vocab]``, the stack's dtype, on its
        device); a new one from PyTorch's allocator when None."""
        import contextlib

        import torch

        if out is not None:
            want = (batch.requests, self.config.vocab)
            if tuple(out.shape) != want or out.dtype != getattr(torch, self.config.dtype) \
                    or out.device != self.device or not out.is_contiguous():
                raise ValueError(f"out must be a contiguous {want} {self.config.dtype} tensor on {self.device}, "
                                 f"got {tuple(out.shape)} {out.dtype} on {out.device}")
        plan = scratch_plan(self.config, batch.total_tokens, batch.requests)
        if self.device.type != "cuda":
            arena = torch.empty(plan.nbytes, dtype=torch.uint8, device=self.device)
            return self._run(batch, plan, arena, None, out), plan
        torch_s, core_s = self._streams(stream)
        with torch.cuda.stream(torch_s) if torch_s is not None else contextlib.nullcontext():
            if self.pool is None:
                arena = torch.empty(plan.nbytes, dtype=torch.uint8, device=self.device)
                return self._run(batch, plan, arena, core_s, out), plan
            from ..cuda.interop import as_torch
            from ..cuda.memory import DeviceArray

            buf = self.pool.allocate(plan.nbytes, core_s)
            try:
                arena = as_torch(DeviceArray(int(buf.handle), (plan.nbytes,), np.uint8, owner=buf,
                                             device_index=self.device.index or 0))
                logits = self._run(batch, plan, arena, core_s, out)
            finally:
                # Every use of the scratch was enqueued on core_s, so the free follows it there.
                self.pool.free(buf, core_s)
            return logits, plan

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

    def _run(self, batch: PackedBatch, plan: ScratchPlan, arena: Any, core_s: Any, out: Any) -> Any:
        import torch

        c, W = self.config, self.weights
        T, R = batch.total_tokens, batch.requests
        hq, hkv, d = c.heads, c.kv_heads, c.head_dim
        dtype = getattr(torch, c.dtype)

        def view(name: str) -> Any:
            r = plan.region(name)
            dt = {"int32": torch.int32, "int64": torch.int64}.get(r.dtype, dtype)
            return arena[r.offset:r.offset + r.nbytes].view(dt).view(r.shape)

        tokens, positions, cu, last = view("tokens"), view("positions"), view("cu_seqlens"), view("last_token")
        # Small pageable host arrays: PyTorch copies them synchronously with the host
        # (the next slice stages requests through StreamPipeline's pinned ring instead).
        tokens.copy_(torch.from_numpy(batch.tokens))
        positions.copy_(torch.from_numpy(batch.positions))
        cu.copy_(torch.from_numpy(batch.cu_seqlens))
        last.copy_(torch.from_numpy(batch.last_token))
        x, h, qkv, proj = view("x"), view("h"), view("qkv"), view("proj")
        q, k, v, attn = view("q"), view("k"), view("v"), view("attn")
        gate_up, act = view("gate_up"), view("act")

        torch.index_select(W["embedding"], 0, tokens, out=x)
        cos, sin = rope_tables(positions, d, c.rope_base)
        for i in range(c.layers):
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
        last_hidden = view("last_hidden")
        rms_norm(torch.index_select(x, 0, last), W["final_norm"], c.norm_eps, out=last_hidden)
        logits = out if out is not None else torch.empty((R, c.vocab), dtype=dtype, device=self.device)
        self._matmul("lm_head", last_hidden, W["lm_head"], logits, core_s)
        return logits

    def _matmul(self, name: str, a: Any, w: Any, out: Any, core_s: Any) -> None:
        import torch

        if self.matmul_choices[name].backend == "hopper":
            from ..kernels.hopper_gemm import gemm_hopper

            gemm_hopper(a, w, out=out, stream=core_s)
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
