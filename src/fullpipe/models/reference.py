"""The stack in plain PyTorch, one request at a time: the output check of the fullpipe
stack. ``torch.matmul`` for every projection, ``scaled_dot_product_attention`` (causal)
per request, the same elementwise functions and the same weights; no packing, no pool,
no fullpipe kernel. It is also the "PyTorch eager" peer's forward."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .config import StackConfig
from .elementwise import apply_rope, rms_norm, rope_tables, swiglu


def reference_prefill(config: StackConfig, weights: dict[str, Any], requests: Sequence[Any], *,
                      dtype: Any = None) -> Any:
    """Logits ``[len(requests), vocab]`` of each request's last token. ``requests``:
    valid host arrays of token ids. ``dtype``: the compute dtype (default the config's;
    ``torch.float32`` computes with the weights upcast, a higher-precision reference)."""
    import torch

    c = config
    dt = dtype or getattr(torch, c.dtype)
    W = {name: w.to(dt) for name, w in weights.items()}
    device = W["embedding"].device
    hq, hkv, d = c.heads, c.kv_heads, c.head_dim
    logits = []
    for request in requests:
        ids = torch.as_tensor(np.asarray(request, dtype=np.int64), device=device)
        n = ids.numel()
        x = W["embedding"][ids]
        cos, sin = rope_tables(torch.arange(n, device=device), d, c.rope_base)
        for i in range(c.layers):
            p = f"layers.{i}."
            qkv = rms_norm(x, W[p + "attn_norm"], c.norm_eps) @ W[p + "wqkv"]
            q = apply_rope(qkv[:, :hq * d].reshape(n, hq, d), cos, sin)
            k = apply_rope(qkv[:, hq * d:(hq + hkv) * d].reshape(n, hkv, d), cos, sin)
            v = qkv[:, (hq + hkv) * d:].reshape(n, hkv, d)
            rep = hq // hkv
            a = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(0, 1), k.repeat_interleave(rep, dim=1).transpose(0, 1),
                v.repeat_interleave(rep, dim=1).transpose(0, 1), is_causal=True)
            x = x + a.transpose(0, 1).reshape(n, hq * d) @ W[p + "wo"]
            h = rms_norm(x, W[p + "ffn_norm"], c.norm_eps)
            x = x + swiglu(h @ W[p + "w_gate_up"]) @ W[p + "w_down"]
        last = rms_norm(x[-1:], W["final_norm"], c.norm_eps)
        logits.append(last @ W["lm_head"])
    return torch.cat(logits)
