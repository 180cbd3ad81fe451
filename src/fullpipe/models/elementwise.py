"""The stack's elementwise pieces, in PyTorch (fullpipe has no kernels for them):
RMSNorm, rotary position embedding (RoPE), SwiGLU. Each computes in float32 and writes
the stack's dtype into ``out`` (a view of the stack's scratch) or a new tensor; the
fullpipe stack and the reference both call these, so they differ only in packing, the
matrix products and attention."""

from __future__ import annotations

from typing import Any


def rms_norm(x: Any, weight: Any, eps: float, out: Any = None) -> Any:
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last dimension."""
    import torch

    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()
    if out is None:
        return y.to(x.dtype)
    return out.copy_(y)


def rope_tables(positions: Any, head_dim: int, base: float) -> tuple[Any, Any]:
    """cos and sin, float32 ``[tokens, head_dim / 2]``, of each token's position
    (``positions``: an integer tensor, one position per token)."""
    import torch

    half = head_dim // 2
    inv_freq = base ** (-torch.arange(half, device=positions.device, dtype=torch.float32) / half)
    angles = positions.float()[:, None] * inv_freq[None, :]
    return torch.cos(angles), torch.sin(angles)


def apply_rope(x: Any, cos: Any, sin: Any, out: Any = None) -> Any:
    """Rotate ``x`` ``[tokens, heads, head_dim]`` by its tokens' angles, the "rotate
    half" form (pairs are element i and i + head_dim/2, as in Llama)."""
    import torch

    half = x.shape[-1] // 2
    xf = x.float()
    x1, x2 = xf[..., :half], xf[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    y = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)
    if out is None:
        return y.to(x.dtype)
    return out.copy_(y)


def swiglu(gate_up: Any, out: Any = None) -> Any:
    """``silu(gate) * up`` where ``gate_up`` is ``[tokens, 2 ffn]``: gate columns first."""
    import torch

    ffn = gate_up.shape[-1] // 2
    gf = gate_up[..., :ffn].float()
    y = torch.nn.functional.silu(gf) * gate_up[..., ffn:].float()
    if out is None:
        return y.to(gate_up.dtype)
    return out.copy_(y)
