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


# --------------------------------------------------------------------------- self-test
def _selftest(argv: list[str] | None = None) -> int:
    """Small checked runs of every fused kernel of kernels/elementwise.py against the
    functions above (for compute-sanitizer): ragged sizes, outputs poisoned; exit 1 on a
    mismatch. Here, not beside the kernels: the kernels do not import models/."""
    import argparse

    import torch

    import sys

    from ..kernels.elementwise import residual_rms_norm, rms_norm, rope_qkv, swiglu, within_one_ulp

    ref = sys.modules[__name__]

    ap = argparse.ArgumentParser(prog="python -m fullpipe.models.elementwise")
    ap.add_argument("--selftest", action="store_true", required=True)
    ap.parse_args(argv)
    bad = 0
    g = torch.Generator(device="cuda").manual_seed(0)

    def report(what: str, got: Any, want: Any) -> None:
        nonlocal bad
        ok = bool(torch.isfinite(got).all()) and within_one_ulp(got, want)
        bad += not ok
        print(f"{'ok  ' if ok else 'BAD '} {what}", flush=True)

    for dt in (torch.bfloat16, torch.float16):
        for t in (1, 37):
            for width in (8, 520, 2048, 4096):
                x = torch.randn(t, width, device="cuda", generator=g).to(dt)
                w = torch.randn(width, device="cuda", generator=g).to(dt)
                out = torch.full_like(x, float("nan"))
                rms_norm(x, w, 1e-5, out)
                report(f"rms_norm {dt} {t}x{width}", out, ref.rms_norm(x, w, 1e-5))
                p = torch.randn(t, width, device="cuda", generator=g).to(dt)
                want_x = x + p
                residual_rms_norm(x, p, w, 1e-5, out)
                report(f"residual_rms_norm {dt} {t}x{width}", out, ref.rms_norm(want_x, w, 1e-5))
            for hq, hkv, d in ((4, 2, 64), (3, 1, 128), (2, 2, 16)):
                qkv = torch.randn(t, (hq + 2 * hkv) * d, device="cuda", generator=g).to(dt)
                pos = torch.randint(0, 4096, (t,), device="cuda", generator=g, dtype=torch.int32)
                q = torch.full((t, hq, d), float("nan"), device="cuda", dtype=dt)
                k, v = torch.full((t, hkv, d), float("nan"), device="cuda", dtype=dt), torch.full(
                    (t, hkv, d), float("nan"), device="cuda", dtype=dt)
                rope_qkv(qkv, pos, q, k, v, hq, hkv, d, 10000.0)
                cos, sin = ref.rope_tables(pos, d, 10000.0)
                report(f"rope_qkv {dt} {t} tokens {hq}/{hkv} heads of {d} (q)", q,
                       ref.apply_rope(qkv[:, :hq * d].view(t, hq, d), cos, sin))
                report(f"rope_qkv {dt} {t} tokens {hq}/{hkv} heads of {d} (k)", k,
                       ref.apply_rope(qkv[:, hq * d:(hq + hkv) * d].view(t, hkv, d), cos, sin))
                report(f"rope_qkv {dt} (v)", v, qkv[:, (hq + hkv) * d:].view(t, hkv, d))
            for ffn in (8, 1000):
                gu = torch.randn(t, 2 * ffn, device="cuda", generator=g).to(dt)
                out = torch.full((t, ffn), float("nan"), device="cuda", dtype=dt)
                swiglu(gu, out)
                report(f"swiglu {dt} {t}x{ffn}", out, ref.swiglu(gu))
    torch.cuda.synchronize()
    return 1 if bad else 0


if __name__ == "__main__":
    import sys

    sys.exit(_selftest())
