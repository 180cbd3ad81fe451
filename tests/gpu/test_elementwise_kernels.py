"""GPU tests of the fused elementwise kernels (fullpipe.kernels.elementwise) against the
PyTorch functions of fullpipe.models.elementwise (the stack's reference) on fresh random
inputs, ragged sizes, outputs poisoned (NaN) first.

Tolerance: one unit in the last place of the reference, elementwise. Both sides compute
the same float32 math and round it once to bf16/fp16; they differ only in the order of
the float32 sum of squares in RMSNorm (a few float32 ulps) and, for libm calls, in
nothing (same sincosf/expf/rsqrtf), so two float32 values a few float32 ulps apart can
round to neighbouring bf16/fp16 values but never further apart. The v copy and the
residual sum written back to x must be exact."""

from __future__ import annotations

import pytest

from fullpipe.kernels import elementwise as ew

from ._torch import needs_torch, torch

pytestmark = pytest.mark.gpu
_needs_torch = pytest.fixture(autouse=True)(needs_torch)

TOKENS = (1, 37, 4099)
DTYPES = ("bfloat16", "float16")


def _ref():
    from fullpipe.models import elementwise

    return elementwise


def _rand(g, *shape, dtype, scale=1.0):
    return (torch.randn(*shape, device="cuda", generator=g) * scale).to(getattr(torch, dtype))


def _poison(*shape, dtype):
    return torch.full(shape, float("nan"), device="cuda", dtype=getattr(torch, dtype))


def _assert_close(got, want, what):
    torch.cuda.synchronize()
    assert torch.isfinite(got).all(), f"{what}: elements left unwritten (NaN poison) or not finite"
    diff = (got.float() - want.float()).abs()
    bound = ew.ulp(want)
    worst = float((diff / bound).max())
    assert worst <= 1.0, f"{what}: {int((diff > bound).sum())} elements beyond one ulp (worst {worst:.2f} ulp)"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens", TOKENS)
@pytest.mark.parametrize("width", (512, 2048))
def test_rms_norm_matches_the_reference(dtype, tokens, width):
    g = torch.Generator(device="cuda").manual_seed(tokens * 31 + width)
    x, w = _rand(g, tokens, width, dtype=dtype, scale=3.0), _rand(g, width, dtype=dtype)
    out = _poison(tokens, width, dtype=dtype)
    torch.cuda.synchronize()
    ew.rms_norm(x, w, 1e-5, out)
    _assert_close(out, _ref().rms_norm(x, w, 1e-5), f"rms_norm {dtype} {tokens}x{width}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens", TOKENS)
@pytest.mark.parametrize("width", (512, 2048))
def test_residual_rms_norm_adds_then_normalizes(dtype, tokens, width):
    g = torch.Generator(device="cuda").manual_seed(tokens * 17 + width)
    x, p, w = (_rand(g, tokens, width, dtype=dtype), _rand(g, tokens, width, dtype=dtype),
               _rand(g, width, dtype=dtype))
    want_x = x.clone().add_(p)  # what the stack's x.add_(proj) leaves
    out = _poison(tokens, width, dtype=dtype)
    torch.cuda.synchronize()
    ew.residual_rms_norm(x, p, w, 1e-5, out)
    torch.cuda.synchronize()
    assert torch.equal(x, want_x), "x after the fused residual add differs from x.add_(proj)"
    _assert_close(out, _ref().rms_norm(want_x, w, 1e-5), f"residual_rms_norm {dtype} {tokens}x{width}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens", TOKENS)
@pytest.mark.parametrize("heads, kv_heads, head_dim", [(16, 16, 128), (8, 2, 128), (8, 8, 64), (6, 2, 64)])
def test_rope_qkv_matches_rope_tables_and_apply_rope(dtype, tokens, heads, kv_heads, head_dim):
    ref = _ref()
    g = torch.Generator(device="cuda").manual_seed(tokens + heads * 7 + head_dim)
    qkv = _rand(g, tokens, (heads + 2 * kv_heads) * head_dim, dtype=dtype, scale=2.0)
    positions = torch.randint(0, 4096, (tokens,), device="cuda", generator=g, dtype=torch.int32)
    q = _poison(tokens, heads, head_dim, dtype=dtype)
    k, v = _poison(tokens, kv_heads, head_dim, dtype=dtype), _poison(tokens, kv_heads, head_dim, dtype=dtype)
    torch.cuda.synchronize()
    ew.rope_qkv(qkv, positions, q, k, v, heads, kv_heads, head_dim, 10000.0)
    cos, sin = ref.rope_tables(positions, head_dim, 10000.0)
    d = head_dim
    _assert_close(q, ref.apply_rope(qkv[:, :heads * d].view(tokens, heads, d), cos, sin), "rope q")
    _assert_close(k, ref.apply_rope(qkv[:, heads * d:(heads + kv_heads) * d].view(tokens, kv_heads, d), cos, sin),
                  "rope k")
    assert torch.equal(v, qkv[:, (heads + kv_heads) * d:].view(tokens, kv_heads, d)), "v is not an exact copy"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens", TOKENS)
@pytest.mark.parametrize("ffn", (1536, 5632, 8))
def test_swiglu_matches_the_reference(dtype, tokens, ffn):
    g = torch.Generator(device="cuda").manual_seed(tokens * 3 + ffn)
    gu = _rand(g, tokens, 2 * ffn, dtype=dtype, scale=3.0)
    out = _poison(tokens, ffn, dtype=dtype)
    torch.cuda.synchronize()
    ew.swiglu(gu, out)
    _assert_close(out, _ref().swiglu(gu), f"swiglu {dtype} {tokens}x{ffn}")


def test_kernels_run_on_the_given_stream_after_its_work():
    """Enqueued on a cuda.core stream: ordered after the stream's earlier work (a long
    sleep before the input is written there) and not on PyTorch's current stream."""
    from cuda.core import Stream

    g = torch.Generator(device="cuda").manual_seed(5)
    s = torch.cuda.Stream()
    core = Stream.from_handle(int(s.cuda_stream))
    x0 = _rand(g, 64, 512, dtype="bfloat16")
    w = _rand(g, 512, dtype="bfloat16")
    x, out = torch.zeros_like(x0), _poison(64, 512, dtype="bfloat16")
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        torch.cuda._sleep(50_000_000)
        x.copy_(x0)
    ew.rms_norm(x, w, 1e-5, out, core)
    s.synchronize()
    _assert_close(out, _ref().rms_norm(x0, w, 1e-5), "rms_norm on a cuda.core stream")


def test_empty_batches_launch_nothing():
    x = torch.empty(0, 512, device="cuda", dtype=torch.bfloat16)
    w = torch.ones(512, device="cuda", dtype=torch.bfloat16)
    assert ew.rms_norm(x, w, 1e-5, torch.empty_like(x)).shape == (0, 512)
    assert ew.swiglu(torch.empty(0, 16, device="cuda", dtype=torch.bfloat16),
                     torch.empty(0, 8, device="cuda", dtype=torch.bfloat16)).shape == (0, 8)
