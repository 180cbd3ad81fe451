"""GPU tests of fullpipe.kernels.flash_attention: against an fp32 reference (PyTorch
math on upcast inputs: scores, mask, softmax, @ V) on fresh random inputs, outputs
poisoned with NaN first, relative error <= 1e-2 per sequence, for every head dim,
dtype and causal mode, tile-multiple and odd lengths, variable-length packed batches
and grouped K/V heads; inputs scaled x30; the options and the error checks."""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fullpipe.kernels import flash_attention as fa  # noqa: E402

# This file checks the mma.sync kernel; on sm_90a "auto" would pick the Hopper kernel
# (tests/gpu/test_flash_attention_hopper.py checks that one).
attention = functools.partial(fa.attention, backend="mma_sync")

pytestmark = pytest.mark.gpu

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
TOL = 1e-2


def _reference(q, k, v, causal, scale=None):
    """fp32 attention of one sequence: q [S, Hq, D], k/v [S, Hkv, D] -> [S, Hq, D]."""
    s_len, hq, d = q.shape
    rep = hq // k.shape[1]
    qf = q.float().transpose(0, 1)
    kf = k.float().repeat_interleave(rep, dim=1).transpose(0, 1)
    vf = v.float().repeat_interleave(rep, dim=1).transpose(0, 1)
    scores = (qf @ kf.transpose(1, 2)) * (scale if scale is not None else 1 / math.sqrt(d))
    if causal:
        mask = torch.ones(s_len, s_len, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return (torch.softmax(scores, dim=-1) @ vf).transpose(0, 1)


def _rel(out, ref):
    return float((out.float() - ref).norm() / ref.norm())


def _inputs(tokens_shape, hq, hkv, d, dtype, seed, magnitude=1.0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    mk = lambda h: (torch.randn(*tokens_shape, h, d, device="cuda", generator=g) * magnitude).to(DTYPES[dtype])
    return mk(hq), mk(hkv), mk(hkv)


DENSE = [  # (B, S, Hq, Hkv)
    (2, 128, 4, 4),  # whole tiles
    (2, 197, 8, 2),  # odd length, GQA 4:1
    (1, 1, 2, 1),  # one token, MQA
    (3, 300, 6, 3),  # several partial tiles, GQA 2:1
]


@pytest.mark.parametrize("d, dtype, causal", list(itertools.product(fa.HEAD_DIMS, DTYPES, (False, True))))
@pytest.mark.parametrize("shape", DENSE, ids=lambda s: "B{}_S{}_H{}_KV{}".format(*s))
def test_dense_matches_fp32_reference(shape, d, dtype, causal):
    b, s, hq, hkv = shape
    q, k, v = _inputs((b, s), hq, hkv, d, dtype, seed=hash((shape, d, dtype, causal)) % 2**31)
    out = torch.full_like(q, float("nan"))
    res = attention(q, k, v, causal=causal, out=out)
    assert res is out
    torch.cuda.synchronize()
    assert not torch.isnan(out).any(), "some output elements were never written"
    for i in range(b):
        err = _rel(out[i], _reference(q[i], k[i], v[i], causal))
        assert err <= TOL, f"batch {i}: relative error {err:.3e}"


VARLEN = [  # (sequence lengths, Hq, Hkv)
    ([1, 70, 129, 300], 6, 3),
    ([64, 64, 64], 4, 4),
    ([517, 3, 250, 1, 96, 128], 8, 1),
]


@pytest.mark.parametrize("d, dtype, causal", list(itertools.product(fa.HEAD_DIMS, DTYPES, (False, True))))
@pytest.mark.parametrize("lens, hq, hkv", VARLEN, ids=lambda x: str(x))
def test_varlen_matches_fp32_reference_per_sequence(lens, hq, hkv, d, dtype, causal):
    total = sum(lens)
    q, k, v = _inputs((total,), hq, hkv, d, dtype, seed=total + d + causal)
    cu = torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=torch.int32, device="cuda")
    out = torch.full_like(q, float("nan"))
    attention(q, k, v, causal=causal, cu_seqlens=cu, max_seqlen=max(lens), out=out)
    torch.cuda.synchronize()
    assert not torch.isnan(out).any()
    for b, n in enumerate(lens):
        sl = slice(int(cu[b]), int(cu[b + 1]))
        err = _rel(out[sl], _reference(q[sl], k[sl], v[sl], causal))
        assert err <= TOL, f"sequence {b} (length {n}): relative error {err:.3e}"


def test_varlen_reads_max_seqlen_from_the_offsets_when_not_given():
    lens = [33, 200, 5]
    q, k, v = _inputs((sum(lens),), 4, 2, 64, "float16", seed=3)
    cu = torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=torch.int32, device="cuda")
    out = attention(q, k, v, causal=True, cu_seqlens=cu)
    torch.cuda.synchronize()
    for b in range(3):
        sl = slice(int(cu[b]), int(cu[b + 1]))
        assert _rel(out[sl], _reference(q[sl], k[sl], v[sl], True)) <= TOL
    bad = torch.tensor([0, 33, 20, sum(lens)], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="never decrease"):
        attention(q, k, v, cu_seqlens=bad)


@pytest.mark.parametrize("d", fa.HEAD_DIMS)
@pytest.mark.parametrize("causal", (False, True))
def test_inputs_scaled_x30_stay_finite_and_correct(d, causal):
    q, k, v = _inputs((2, 160), 4, 4, d, "bfloat16", seed=30 + d, magnitude=30.0)
    out = attention(q, k, v, causal=causal)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all()
    for i in range(2):
        assert _rel(out[i], _reference(q[i], k[i], v[i], causal)) <= TOL


def test_custom_scale_stream_and_every_tiling():
    from fullpipe.cuda.device import Device
    from fullpipe.cuda.streams import create_stream

    s = create_stream(Device(0))
    q, k, v = _inputs((2, 250), 4, 2, 128, "float16", seed=7)
    torch.cuda.synchronize()
    for d in fa.HEAD_DIMS:
        qd, kd, vd = (x[..., :d].contiguous() for x in (q, k, v))
        torch.cuda.synchronize()
        for tiling in fa.CANDIDATE_TILINGS[d]:
            for causal in (False, True):
                out = torch.full_like(qd, float("nan"))
                torch.cuda.synchronize()
                attention(qd, kd, vd, causal=causal, scale=0.05, out=out, stream=s, _tiling=tiling)
                s.sync()
                for i in range(2):
                    err = _rel(out[i], _reference(qd[i], kd[i], vd[i], causal, scale=0.05))
                    assert err <= TOL, f"d{d} {tiling.name} causal={causal}: {err:.3e}"


CANDIDATES = [(d, t) for d in fa.HEAD_DIMS for t in fa.CANDIDATE_TILINGS[d]]


@pytest.mark.parametrize("d, tiling", CANDIDATES, ids=lambda x: x.name if isinstance(x, fa.Tiling) else f"d{x}")
def test_every_candidate_tiling_matches_fp32_reference(d, tiling):
    """Each tiling the sweep may choose (16- or 32-row warps, Q in registers or re-read,
    one or two barriers per tile), fp16 and bf16, causal and not: odd lengths over
    several query and key tiles with GQA 4:1, and a varlen batch (1-token, partial-tile
    and multi-tile sequences, GQA 2:1)."""
    lens = [1, 70, 129, 300, 517]
    cu = torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=torch.int32, device="cuda")
    for dtype in DTYPES:
        for causal in (False, True):
            where = f"{tiling.name} d{d} {dtype} causal={causal}"
            q, k, v = _inputs((2, 601), 8, 2, d, dtype, seed=hash((tiling, d, dtype, causal, 1)) % 2**31)
            out = torch.full_like(q, float("nan"))
            attention(q, k, v, causal=causal, out=out, _tiling=tiling)
            torch.cuda.synchronize()
            assert not torch.isnan(out).any(), f"{where}: some output elements were never written"
            for i in range(2):
                err = _rel(out[i], _reference(q[i], k[i], v[i], causal))
                assert err <= TOL, f"{where} dense S=601 batch {i}: relative error {err:.3e}"
            q, k, v = _inputs((sum(lens),), 6, 3, d, dtype, seed=hash((tiling, d, dtype, causal, 2)) % 2**31)
            out = torch.full_like(q, float("nan"))
            attention(q, k, v, causal=causal, cu_seqlens=cu, max_seqlen=max(lens), out=out, _tiling=tiling)
            torch.cuda.synchronize()
            assert not torch.isnan(out).any(), f"{where} varlen: some output elements were never written"
            for b, n in enumerate(lens):
                sl = slice(int(cu[b]), int(cu[b + 1]))
                err = _rel(out[sl], _reference(q[sl], k[sl], v[sl], causal))
                assert err <= TOL, f"{where} varlen sequence {b} (length {n}): relative error {err:.3e}"


def test_cupy_inputs_give_cupy_output():
    cupy = pytest.importorskip("cupy")
    q, k, v = _inputs((1, 90), 2, 2, 64, "float16", seed=11)
    torch.cuda.synchronize()
    qc, kc, vc = (cupy.asarray(x) for x in (q, k, v))
    out = attention(qc, kc, vc, causal=True)
    cupy.cuda.get_current_stream().synchronize()
    assert isinstance(out, cupy.ndarray) and out.shape == qc.shape
    assert _rel(torch.as_tensor(out, device="cuda")[0], _reference(q[0], k[0], v[0], True)) <= TOL


def test_errors_name_the_problem():
    q, k, v = _inputs((2, 64), 4, 4, 64, "float16", seed=1)
    with pytest.raises(ValueError, match="contiguous"):
        attention(q.transpose(1, 2), k, v)
    with pytest.raises(ValueError, match="multiple of key/value heads"):
        attention(q, k[:, :, :3].contiguous(), v[:, :, :3].contiguous())
    with pytest.raises(TypeError, match="same dtype"):
        attention(q, k.bfloat16(), v)
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        attention(q.float(), k.float(), v.float())
    with pytest.raises(ValueError, match="head dim 32"):
        attention(q[..., :32].contiguous(), k[..., :32].contiguous(), v[..., :32].contiguous())
    with pytest.raises(TypeError, match="int32"):
        attention(q[0], k[0], v[0], cu_seqlens=torch.tensor([0, 64], device="cuda"), max_seqlen=64)
    with pytest.raises(ValueError, match="out must be"):
        attention(q, k, v, out=torch.empty(2, 64, 4, 128, dtype=torch.float16, device="cuda"))
