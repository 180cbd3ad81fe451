"""The stack in plain PyTorch, one request at a time: the output check of the fullpipe
stack. ``torch.matmul`` for every projection, ``scaled_dot_product_attention`` (causal)
per request, the same elementwise functions and the same weights; no packing, no pool,
no fullpipe kernel. It is also the "PyTorch eager" peer's forward."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .config import StackConfig
from .elementwise import apply_rope, rms_norm, rope_tables, swiglu


def run_layers(config: StackConfig, W: dict[str, Any], x: Any, positions: Any, attend: Any) -> Any:
    """``x`` ``[n, width]`` (tokens at ``positions``) through every layer; ``attend(i, q, k,
    v)`` gives layer i's attention output ``[n, heads, head_dim]`` from its rotated q, k and
    v (``[n, heads or kv_heads, head_dim]``). Returns the residual stream after the last layer."""
    c = config
    hq, hkv, d = c.heads, c.kv_heads, c.head_dim
    n = x.shape[0]
    cos, sin = rope_tables(positions, d, c.rope_base)
    for i in range(c.layers):
        p = f"layers.{i}."
        qkv = rms_norm(x, W[p + "attn_norm"], c.norm_eps) @ W[p + "wqkv"]
        q = apply_rope(qkv[:, :hq * d].reshape(n, hq, d), cos, sin)
        k = apply_rope(qkv[:, hq * d:(hq + hkv) * d].reshape(n, hkv, d), cos, sin)
        v = qkv[:, (hq + hkv) * d:].reshape(n, hkv, d)
        a = attend(i, q, k, v)
        x = x + a.reshape(n, hq * d) @ W[p + "wo"]
        h = rms_norm(x, W[p + "ffn_norm"], c.norm_eps)
        x = x + swiglu(h @ W[p + "w_gate_up"]) @ W[p + "w_down"]
    return x


def forward_request(config: StackConfig, W: dict[str, Any], ids: Any) -> tuple[Any, list[tuple[Any, Any]]]:
    """(logits ``[1, vocab]`` of the last token, per layer (K, V) ``[n, kv_heads, head_dim]``
    after RoPE) of one request ``ids`` (an int64 tensor on the weights' device): causal SDPA
    over the request."""
    import torch

    rep = config.heads // config.kv_heads
    kv: list[tuple[Any, Any]] = []

    def causal(i: int, q: Any, k: Any, v: Any) -> Any:
        kv.append((k, v))
        o = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(0, 1), k.repeat_interleave(rep, dim=1).transpose(0, 1),
            v.repeat_interleave(rep, dim=1).transpose(0, 1), is_causal=True)
        return o.transpose(0, 1)

    x = run_layers(config, W, W["embedding"][ids], torch.arange(ids.numel(), device=ids.device), causal)
    return rms_norm(x[-1:], W["final_norm"], config.norm_eps) @ W["lm_head"], kv


def reference_prefill(config: StackConfig, weights: dict[str, Any], requests: Sequence[Any], *,
                      dtype: Any = None) -> Any:
    """Logits ``[len(requests), vocab]`` of each request's last token. ``requests``:
    valid host arrays of token ids. ``dtype``: the compute dtype (default the config's;
    ``torch.float32`` computes with the weights upcast, a higher-precision reference)."""
    import torch

    dt = dtype or getattr(torch, config.dtype)
    W = {name: w.to(dt) for name, w in weights.items()}
    device = W["embedding"].device
    return torch.cat([forward_request(config, W, torch.as_tensor(np.asarray(r, dtype=np.int64), device=device))[0]
                      for r in requests])
